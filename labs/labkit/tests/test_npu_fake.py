"""labkit.npu_fake: the FAKE torch_npu on CPU (issue 31). Installing it cannot be undone in a
process (PyTorch renames its PrivateUse1 backend once), so every case runs in one child process
that installs it (``LABKIT_FAKE_NPU=2``) and reports each case's outcome."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

CASES = textwrap.dedent(
    r"""
    import gc, json, sys, traceback
    import torch
    import labkit  # LABKIT_FAKE_NPU=2: installs the fake
    from labkit import emu, npu_fake
    import labkit.npu as ln

    results = {}
    def case(fn):
        try:
            fn()
            results[fn.__name__] = "ok"
        except Exception:
            results[fn.__name__] = traceback.format_exc()
        return fn

    @case
    def installed_and_named_fake():
        import torch_npu
        from labkit.device import describe, get_device
        assert npu_fake.installed() and torch_npu.__labkit_fake__
        assert "fake" in torch_npu.__version__ and torch.npu is torch_npu.npu
        info = get_device()
        assert (info.kind, info.torch_device, info.index) == ("npu", "npu:0", 0), info
        assert "fake" in info.name and describe()["torch_npu"] == torch_npu.__version__
        assert torch.npu.device_count() == 2 and torch.npu.is_available()

    @case
    def device_strings_and_placement():
        x = torch.randn(3, 4)
        for d in (x.npu(), x.to("npu"), x.to("npu:0"), x.to(torch.device("npu", 0))):
            assert d.device == torch.device("npu:0") and d.is_npu and not d.is_cpu
        assert torch.zeros(2, device="npu:1").device == torch.device("npu:1")
        assert torch.tensor([1.0, 2.0], device="npu").device.type == "npu"
        assert torch.arange(4, device="npu").device.type == "npu"
        y = x.npu()
        assert torch.equal((y @ y.T).relu().cpu(), (x @ x.T).relu())
        assert abs(y.sum().item() - x.sum().item()) < 1e-5
        assert y.tolist() == x.tolist()
        v = y[1]
        v.zero_()  # a view writes through to its base, as on a card
        assert y.cpu()[1].abs().sum() == 0
        lin = torch.nn.Linear(4, 2).to("npu:0", torch.bfloat16)
        assert isinstance(lin.weight, torch.nn.Parameter) and lin.weight.device.type == "npu"
        assert lin(x.to("npu:0", torch.bfloat16)).dtype == torch.bfloat16
        assert lin.weight.elem.dtype == torch.bfloat16  # the data converted, not only the metadata
        z = torch.randn(2, 3).npu()
        z.data = torch.ones(2, 3, dtype=torch.float16).npu()
        assert z.dtype == torch.float16 and torch.equal(z.cpu(), torch.ones(2, 3, dtype=torch.float16))

    @case
    def card_errors_are_raised():
        y = torch.randn(2, 3).npu()
        for bad, words in (
            (lambda: y + torch.randn(2, 3), "same device"),
            (lambda: y + torch.randn(2, 3).to("npu:1"), "same device"),
            (lambda: y.numpy(), "Tensor.cpu()"),
            (lambda: torch.nn.Linear(3, 2).npu().bfloat16()(y), "dtype"),
        ):
            try:
                bad()
            except (RuntimeError, TypeError) as e:
                assert words in str(e), e
            else:
                raise AssertionError(f"no error for {words}")
        assert (y + torch.tensor(2.0)).device.type == "npu"  # a 0-dim CPU tensor is a scalar
        assert y[torch.tensor([1, 0])].device.type == "npu"  # CPU indices are allowed

    @case
    def fused_ops_forward_with_card_dtypes():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 3, 5, 8, generator=g).bfloat16()
        gamma = torch.rand(8, generator=g).bfloat16()
        cos, sin = torch.randn(1, 1, 5, 8, generator=g).bfloat16(), torch.randn(1, 1, 5, 8, generator=g).bfloat16()
        q, k, v = (torch.randn(1, 2, 4, 8, generator=g).bfloat16() for _ in range(3))
        logits = torch.randn(6, 8, generator=g)
        xs, w = torch.randn(5, 8, generator=g).bfloat16(), torch.randn(2, 8, 4, generator=g).bfloat16()
        calls = [
            ("npu_rms_norm", (x, gamma), {"epsilon": 1e-5}),
            ("npu_add_rms_norm", (x, x, gamma), {}),
            ("npu_swiglu", (x,), {"dim": -1}),
            ("npu_rotary_mul", (x, cos, sin), {"rotary_mode": "interleave"}),
            ("npu_moe_gating_top_k_softmax", (logits,), {"k": 2}),
            ("npu_grouped_matmul", ([xs], [w]), {"group_list": [2, 5], "split_item": 2, "group_type": 0}),
            ("npu_fusion_attention", (q, k, v, 2, "BNSD"), {"scale": 0.3, "sparse_mode": 2}),
            ("npu_fused_infer_attention_score", (q, k, v), {"num_heads": 2, "input_layout": "BNSD"}),
            ("npu_dynamic_mx_quant", (torch.randn(4, 64, generator=g).bfloat16(),), {}),
        ]
        npu = lambda o: torch.utils._pytree.tree_map(lambda t: t.npu() if isinstance(t, torch.Tensor) else t, o)
        for name, args, kwargs in calls:
            ref = getattr(ln, name)(*args, **kwargs)
            with emu.session(measurer=False) as s:
                got = getattr(ln, name)(*npu(args), **npu(kwargs))
            assert s.report().launches == 0, name  # the card path charges nothing
            rf, _ = torch.utils._pytree.tree_flatten(ref)
            gf, _ = torch.utils._pytree.tree_flatten(got)
            assert len(rf) == len(gf), name
            for a, b in zip(rf, gf):
                if isinstance(a, torch.Tensor):
                    assert b.device.type == "npu" and b.dtype == a.dtype and b.shape == a.shape, (name, b)
                    assert torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a, (b.cpu().view(torch.uint8) if a.element_size() == 1 else b.cpu())), name
        assert set(npu_fake.stats()["fused_ops"]) == {c[0] for c in calls}

    @case
    def quant_ops_replay_the_sana_quant_linear_on_the_card():
        # cann-recipes SANA-Video QuantLinear (a8w8 and a4w4), call for call, on npu:0 vs the CPU
        g = torch.Generator().manual_seed(1)
        x, w, bias = torch.randn(6, 128, generator=g), torch.randn(48, 128, generator=g), torch.randn(48, generator=g)
        e8m0, fp4 = torch.float8_e8m0fnu, torch.float4_e2m1fn_x2

        def linear(x, w, bias, mode):
            if mode == "a8w8":
                wq, ws = ln.npu_dynamic_mx_quant(w, dst_type=torch.float8_e4m3fn)
                wq, ws = wq.transpose(-1, -2), ws.transpose(0, 1)
                xq, xs = ln.npu_dynamic_mx_quant(x.bfloat16(), dst_type=torch.float8_e4m3fn)
                return ln.npu_quant_matmul(xq, wq, ws, pertoken_scale=xs, bias=bias, scale_dtype=e8m0,
                    pertoken_scale_dtype=e8m0, output_dtype=torch.bfloat16, group_sizes=[1, 1, 32])
            wq, ws = ln.npu_dynamic_mx_quant(w.transpose(-1, -2), dst_type=fp4, axis=0)
            xq, xs = ln.npu_dynamic_mx_quant(x.bfloat16(), dst_type=fp4)
            return ln.npu_quant_matmul(xq, wq.contiguous(), ws.contiguous(), pertoken_scale=xs,
                pertoken_scale_dtype=e8m0, output_dtype=torch.bfloat16, group_sizes=[1, 1, 32], bias=bias,
                x1_dtype=fp4, x2_dtype=fp4, scale_dtype=e8m0)

        for mode in ("a8w8", "a4w4"):
            ref = linear(x, w, bias, mode)
            got = linear(x.npu(), w.npu(), bias.npu(), mode)
            assert got.device.type == "npu" and got.dtype == torch.bfloat16 == ref.dtype, mode
            assert torch.equal(got.cpu(), ref), mode

    @case
    def fused_op_signatures_and_devices_are_checked():
        import torch_npu
        x, gamma = torch.randn(2, 8).npu(), torch.ones(8).npu()
        for bad, exc, words in (
            (lambda: torch_npu.npu_rms_norm(x, gamma, eps=1e-6), TypeError, "eps"),
            (lambda: torch_npu.npu_rms_norm(x.cpu(), gamma.cpu()), RuntimeError, "on an NPU"),
            (lambda: torch_npu.npu_rms_norm(x, gamma.cpu()), RuntimeError, "same device"),
            (lambda: torch_npu.npu_fused_infer_attention_score(x, x, x, scale_value=1.0), TypeError, "scale_value"),
        ):
            try:
                bad()
            except exc as e:
                assert words in str(e), e
            else:
                raise AssertionError(words)

    @case
    def streams_events_synchronize():
        s = torch.npu.Stream(device="npu:0")
        assert torch.npu.current_stream() is torch.npu.default_stream()
        with torch.npu.stream(s):
            assert torch.npu.current_stream() is s
            s.wait_stream(torch.npu.default_stream())
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        end.record(s)
        torch.npu.synchronize()
        assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
        for bad, words in (
            (lambda: torch.npu.Event().elapsed_time(torch.npu.Event()), "enable_timing"),
            (lambda: start.elapsed_time(torch.npu.Event(enable_timing=True)), "recorded"),
            (lambda: s.wait_event(torch.npu.Event()), "never recorded"),
            (lambda: s.wait_stream("main"), "Stream"),
            (lambda: torch.npu.stream("copy").__enter__(), "Stream"),
        ):
            try:
                bad()
            except (RuntimeError, TypeError) as e:
                assert words in str(e), e
            else:
                raise AssertionError(words)
        st = npu_fake.stats()
        assert st["streams"] >= 1 and st["stream_switches"] >= 1 and st["synchronize"] >= 1

    @case
    def memory_queries_follow_live_tensors():
        gc.collect()
        base = torch.npu.memory_allocated()
        torch.npu.reset_peak_memory_stats()
        t = torch.empty(1024, dtype=torch.bfloat16, device="npu")
        view = t[:10]
        assert torch.npu.memory_allocated() == base + 2048  # a view adds nothing
        del t, view
        gc.collect()
        assert torch.npu.memory_allocated() == base and torch.npu.max_memory_allocated() == base + 2048
        free, total = torch.npu.mem_get_info()
        assert total == 64 * 1024**3 and free == total - base

    @case
    def measured_session_uses_the_device():
        with emu.session("910B") as s:
            assert s.mode == "measured"
            with s.stream("copy"):
                d = s.memory.to_device(torch.randn(8, 8), "w")
            back = s.memory.to_host(d)
        assert d.device.type == "npu" and back.device.type == "cpu"
        assert s.report().h2d_bytes == 256

    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    env = {**os.environ, "LABKIT_FAKE_NPU": "2"}
    env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    res = subprocess.run([sys.executable, "-c", CASES], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "name",
    [
        "installed_and_named_fake",
        "device_strings_and_placement",
        "card_errors_are_raised",
        "fused_ops_forward_with_card_dtypes",
        "quant_ops_replay_the_sana_quant_linear_on_the_card",
        "fused_op_signatures_and_devices_are_checked",
        "streams_events_synchronize",
        "memory_queries_follow_live_tensors",
        "measured_session_uses_the_device",
    ],
)
def test_npu_mode_fake(outcomes: dict[str, str], name: str) -> None:
    assert outcomes.get(name) == "ok", outcomes.get(name, f"case {name} did not run")


def test_fake_is_installed_only_when_asked() -> None:
    """Without LABKIT_FAKE_NPU, importing labkit leaves torch_npu unimportable (CPU emulation);
    with a real torch_npu importable the fake refuses to stand in for it."""
    code = (
        "import sys, labkit, labkit.device as d; "
        "assert 'torch_npu' not in sys.modules and d.get_device().kind == 'cpu-emu'; print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if k != "LABKIT_FAKE_NPU"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "ok", res.stderr[-2000:]


def test_fake_refuses_when_a_real_torch_npu_is_importable(tmp_path) -> None:
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("")
    env = {**os.environ, "LABKIT_FAKE_NPU": "1", "PYTHONPATH": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-c", "import labkit"], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode != 0 and "a real torch_npu is installed" in res.stderr, res.stderr[-2000:]
