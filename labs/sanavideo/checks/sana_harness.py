"""Trusted code the sanavideo checkers run in a child process (through labkit.check.run_function).

It loads the lab's own TinySana and weights (never the attendee's copies), imports the
attendee's module from the lab folder (the cwd), runs it, and returns plain data (tensors,
numbers, strings) for the checker to judge. Attendee code runs in this same child process, which
is why the checker itself never imports it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sanacheck as sc  # noqa: E402  (puts the lab's upstream TinySana first on sys.path)
from labkit import emu  # noqa: E402
from labkit.check.draws import Draws  # noqa: E402
from tinysana import layers, offload, profiler  # noqa: E402
from tinysana.model import TinySana  # noqa: E402
from tinysana.sampling import generate  # noqa: E402

#: the emulated card of step 4: 64 GiB scaled as the weights are (SANA-Video's ~9.5 GB -> TinySana's
#: 882 KiB, 13.8% of the card either way): 6.25 MiB (see steps/04-one-device.md)
ONE_DEVICE_SCALE = 6400 / (64 * 1024 * 1024)


def load_model() -> TinySana:
    torch.manual_seed(0)
    return profiler.instrument(TinySana.load(sc.WEIGHTS))


def import_attendee(file: str) -> Any:
    path = Path.cwd() / file
    if not path.is_file():
        raise FileNotFoundError(f"{file} does not exist in the lab folder")
    spec = importlib.util.spec_from_file_location(f"attendee_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sample(model: TinySana, prompt: str, seed: int, **session_kw: Any) -> tuple[torch.Tensor, dict]:
    """Frames and a summary of the emulated run."""
    with emu.session(measurer=False, **session_kw) as s:
        frames = generate(model, prompt, seed=seed)
    rep = s.report()
    ops = {name: (st.count, st.launches, st.time_ms) for name, st in rep.ops.items()}
    return frames, {"elapsed_ms": rep.elapsed_ms, "launches": rep.launches, "ops": ops}


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else type(t).__name__


class _CountCalls:
    """Wrap labkit.npu functions (before the attendee imports them) to count their calls."""

    def __init__(self, names: list[str]) -> None:
        import labkit.npu as npu

        self.counts = dict.fromkeys(names, 0)
        self.args: dict[str, list[dict]] = {n: [] for n in names}
        for name in names:
            fn = getattr(npu, name)

            def wrapped(*a: Any, __fn: Any = fn, __name: str = name, **k: Any) -> Any:
                self.counts[__name] += 1
                if __name == "npu_fusion_attention":
                    self.args[__name].append(_attention_call(*a, **k))
                elif __name == "npu_rotary_mul":
                    self.args[__name].append(
                        {"dtypes": [_dtype(t) for t in (list(a) + list(k.values()))[:3]]}
                    )
                return __fn(*a, **k)

            setattr(npu, name, wrapped)


def _attention_call(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: Any = None,
    input_layout: Any = None,
    *rest: Any,
    **kw: Any,
) -> dict:
    """What an npu_fusion_attention call asked for, against its query's shape (BNSD)."""
    scale = kw.get("scale", rest[5] if len(rest) > 5 else 1.0)
    return {
        "head_num": head_num,
        "input_layout": input_layout,
        "scale": float(scale),
        "q_shape": list(query.shape),
        "has_mask": kw.get("atten_mask", rest[3] if len(rest) > 3 else None) is not None,
    }


class _Conv1x1Counter(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in (torch.nn.functional.conv2d, torch.conv2d) and len(args) > 1:
            w = args[1]
            if isinstance(w, torch.Tensor) and w.dim() == 4 and tuple(w.shape[2:]) == (1, 1):
                self.n += 1
        return func(*args, **(kwargs or {}))


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.float() - b.float()).abs().max())


def _unit_cases(case_seed: int) -> dict[str, Any]:
    """Inputs the attendee has not seen: shapes, heads, eps and dtypes drawn from ``case_seed`` (the
    checker derives it from the run), never the model's own (2 heads of 32, eps 1e-6, fp32)."""
    import random

    r = random.Random(case_seed)
    g = torch.Generator().manual_seed(case_seed)
    heads = r.choice([3, 4, 5])
    d = r.choice([16, 24, 48])
    n, nk = r.randint(5, 9), r.randint(6, 11)
    eps = r.choice([0.05, 0.1, 0.25])
    dim = r.choice([24, 40, 48])
    norm = layers.RMSNorm(dim, eps=eps)
    norm.weight.data = torch.rand(dim, generator=g) + 0.5
    # small inputs, so that eps changes the result (mean(x^2) is about eps)
    x = torch.randn(2, 3, 7, dim, generator=g) * 0.2
    t, h, w = 2, 2, r.choice([2, 3])
    freqs = layers.rope_freqs(t, h, w, d)
    q_rope = torch.randn(2, heads, t * h * w, d, generator=g)
    q, k, v = (
        torch.randn(2, heads, n, d, generator=g) * 2,
        torch.randn(2, heads, nk, d, generator=g) * 2,
        torch.randn(2, heads, nk, d, generator=g),
    )
    mask = torch.zeros(2, 1, n, nk, dtype=torch.bool)
    mask[0, ..., nk - 3 :] = True
    mask[1, ..., : r.randint(1, 3)] = True
    convs = [layers.PointwiseConv2d(dim, 40), layers.PointwiseConv2d(dim, 24, bias=False)]
    for c in convs:
        c.weight.data = torch.randn(c.weight.shape, generator=g) * 0.3
        if c.bias is not None:
            c.bias.data = torch.randn(c.bias.shape, generator=g)
    xc = torch.randn(3, dim, 4, 5, generator=g)
    return {
        "norm": norm,
        "x": x,
        "freqs": freqs,
        "q_rope": q_rope,
        "qkv": (q, k, v),
        "mask": mask,
        "convs": convs,
        "xc": xc,
        "shape": {"heads": heads, "head_dim": d, "eps": eps},
    }


def _launches(fn: Any, *args: Any) -> tuple[Any, int]:
    """``fn(*args)`` and the kernel launches it charged to the emulated device."""
    with emu.session(measurer=False) as s:
        out = fn(*args)
    return out, s.report().launches


def fused_ops(prompt: str, seed: int, case_seed: int) -> dict:
    """Step 2: reference vs patched clip, per-op errors on unseen shapes and parameters, the
    arguments each fused op got, kernel launches per call, emulated times."""
    torch.set_num_threads(1)
    model = load_model()
    ref, ref_run = sample(model, prompt, seed)
    orig = {
        "rms_norm": layers.RMSNorm.forward,
        "rope": layers.apply_rotary_emb,
        "attention": layers.softmax_attention,
        "conv1x1": layers.PointwiseConv2d.forward,
    }
    counter = _CountCalls(["npu_rms_norm", "npu_rotary_mul", "npu_fusion_attention"])
    mod = import_attendee("npu_patches.py")
    mod.apply_npu_patches()
    now = {
        "rms_norm": layers.RMSNorm.forward,
        "rope": layers.apply_rotary_emb,
        "attention": layers.softmax_attention,
        "conv1x1": layers.PointwiseConv2d.forward,
    }
    c = _unit_cases(case_seed)
    norm, x, freqs, qr, (q, k, v), mask, xc = (
        c["norm"],
        c["x"],
        c["freqs"],
        c["q_rope"],
        c["qkv"],
        c["mask"],
        c["xc"],
    )
    units: dict[str, float] = {}
    launches: dict[str, int] = {}
    dtypes: dict[str, list[str]] = {}
    with torch.no_grad():
        got, launches["rms_norm"] = _launches(now["rms_norm"], norm, x)
        units["rms_norm"] = _max_err(got, orig["rms_norm"](norm, x))
        eps_default = layers.RMSNorm(norm.weight.shape[0])
        eps_default.weight.data = norm.weight.data
        units["rms_norm_vs_default_eps"] = _max_err(got, orig["rms_norm"](eps_default, x))
        got, launches["rope"] = _launches(now["rope"], qr, freqs)
        units["rope"] = _max_err(got, orig["rope"](qr, freqs))
        units["rope_vs_half"] = _max_err(got, _rope_half(qr, freqs))
        calls_before = len(counter.args["npu_fusion_attention"])
        got, launches["attention"] = _launches(now["attention"], q, k, v, mask)
        units["attention"] = _max_err(got, orig["attention"](q, k, v, mask))
        attention_args = counter.args["npu_fusion_attention"][calls_before:]
        units["conv1x1"] = 0.0
        launches["conv1x1"] = 0
        for conv in c["convs"]:
            got, n = _launches(now["conv1x1"], conv, xc)
            units["conv1x1"] = max(units["conv1x1"], _max_err(got, orig["conv1x1"](conv, xc)))
            launches["conv1x1"] = max(launches["conv1x1"], n)
        # the model runs in bf16 on the NPU: each op must keep its input's dtype
        xb, qb = x.bfloat16(), qr.bfloat16()
        normb = layers.RMSNorm(norm.weight.shape[0], eps=norm.eps).bfloat16()
        normb.weight.data = norm.weight.data.bfloat16()
        rope_before = len(counter.args["npu_rotary_mul"])
        rope_b = now["rope"](qb, freqs)
        # torch_npu's npu_rotary_mul needs cos and sin in x's dtype (the emulator would upcast)
        rope_dtypes = [
            call["dtypes"]
            for call in counter.args["npu_rotary_mul"][rope_before:]
            if len(set(call["dtypes"])) > 1
        ]
        for op, out in (
            ("rms_norm", now["rms_norm"](normb, xb)),
            ("rope", rope_b),
            ("attention", now["attention"](q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)),
        ):
            if out.dtype != torch.bfloat16:
                dtypes[op] = ["bfloat16", str(out.dtype).replace("torch.", "")]
    counts_before = dict(counter.counts)
    conv_mode = _Conv1x1Counter()
    with conv_mode:
        out, out_run = sample(model, prompt, seed)
    calls = {k: counter.counts[k] - counts_before[k] for k in counter.counts}
    return {
        "ref": ref,
        "out": out,
        "ref_ms": ref_run["elapsed_ms"],
        "out_ms": out_run["elapsed_ms"],
        "ref_launches": ref_run["launches"],
        "out_launches": out_run["launches"],
        "replaced": {k: int(now[k] is not orig[k]) for k in orig},
        "units": units,
        "unit_launches": launches,
        "unit_shape": c["shape"],
        "attention_args": attention_args,
        "dtypes": dtypes,
        "rope_dtypes": rope_dtypes[0] if rope_dtypes else None,
        "calls": calls,
        "conv1x1_calls": conv_mode.n,
    }


def _rope_half(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """What npu_rotary_mul(..., "half") gives with interleaved cos/sin (the classic mix-up)."""
    cos = freqs.real.repeat_interleave(2, dim=-1)[None, None]
    sin = freqs.imag.repeat_interleave(2, dim=-1)[None, None]
    x1, x2 = x.float().chunk(2, dim=-1)
    return x.float() * cos + torch.cat((-x2, x1), dim=-1) * sin


# -- step 3 ------------------------------------------------------------------------------------

MXFP4_LAYERS = ("attn.qkv", "cross_attn.q_linear", "cross_attn.kv_linear", "cross_attn.proj")
MXFP8_LAYERS = ("attn.proj", "mlp.inverted_conv", "mlp.point_conv")
_BYTES_PER_ELEMENT = {None: 2.0, "mxfp4": 0.5 + 1 / 32, "mxfp8": 1.0 + 1 / 32}


def expected_format(name: str, quant_type: str) -> str | None:
    if quant_type == "bf16" or not name.endswith(MXFP4_LAYERS + MXFP8_LAYERS):
        return None
    return "mxfp4" if quant_type == "a4w4" and name.endswith(MXFP4_LAYERS) else "mxfp8"


#: E2M1 ties: each lies exactly halfway between two grid values; ties go to the even code
#: (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
E2M1_TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
#: E4M3 ties at scale 1 (a block whose amax is in [256, 512)): halfway between neighbours.
E4M3_TIES = (1.0625, 1.1875, 2.125, 2.375, 9.5, 10.5, 8.5 * 2.0**-9, 272.0)


def scale_rule_cases(case_seed: int) -> torch.Tensor:
    """Blocks that tell scale rules and rounding modes apart: exact powers of two, values just under
    one, values that saturate, tiny and zero blocks, exact ties of both grids (x / scale halfway
    between two element values), and random blocks drawn from ``case_seed`` (unseen inputs)."""
    g = torch.Generator().manual_seed(3)
    ties4 = torch.tensor([*E2M1_TIES, *(-t for t in E2M1_TIES)] * 2 + [6.0, -6.0, 0.0, 4.0])
    ties8 = torch.tensor([*E4M3_TIES, *(-t for t in E4M3_TIES)] * 2)
    ties8 = torch.cat([ties8[:30], torch.tensor([300.0, -300.0])])  # amax 300: scale 1 in E4M3
    rows = [
        torch.full((32,), 4.0),
        torch.linspace(-7.9, 7.9, 32),
        torch.linspace(-1.0, 0.999, 32) * 3.0,
        torch.randn(32, generator=g) * 1e-3,
        torch.zeros(32),
        torch.linspace(-448.0, 500.0, 32),
        torch.randn(32, generator=g) * 37.0,
        torch.tensor([6.5, -0.3] * 16),
        ties4,  # amax 6: scale 1 in E2M1, every other value a tie
        ties4 * 2.0**-5,  # the same ties at another scale
        ties8,
        ties8 * 2.0**7,
    ]
    rows += list(torch.randn(8, 32, generator=g) * torch.logspace(-2, 2, 8)[:, None])
    r = torch.Generator().manual_seed(case_seed)
    rows += list(
        torch.randn(10, 32, generator=r) * torch.exp2(torch.randint(-12, 12, (10, 1), generator=r).float())
    )
    # on every press, two blocks whose amax is one float32 ulp under a power of two 2^k (k drawn, one
    # above 1 and one below 1): floor(log2(amax)) computed in floating point rounds up there, one scale
    # too large (for k <= -2 and k >= 3 here; near 1 the spacing of the floats is fine enough that it
    # may not, and the exact k where it starts depends on the CPU's log2)
    edges = Draws(seed=case_seed)
    for lo_exp, hi_exp in ((3, 10), (-6, -2)):
        below, _p, _ = edges.float_edges("float32", lo_exp=lo_exp, hi_exp=hi_exp)
        block = torch.rand(32, generator=r) * below * 0.9
        block[int(torch.randint(0, 32, (1,), generator=r))] = below
        rows.append(block * edges.random.choice([1.0, -1.0]))
    return torch.stack(rows).reshape(8, 128)


def _scale(blocks: torch.Tensor, emax: int) -> torch.Tensor:
    amax = blocks.abs().amax(-1, keepdim=True)
    _, e = torch.frexp(amax)
    return torch.where(amax > 0, torch.ldexp(torch.ones_like(amax), (e - 1 - emax).float()), 1.0)


def _grid_round(v: torch.Tensor, fmt: str, mode: str) -> torch.Tensor:
    """v (already scaled and saturated) onto the element grid with a rounding mode other than
    ties-to-even: "away" (half away from zero), "down" (half toward zero), "trunc" (toward zero)."""
    import labkit.mx as lmx

    if fmt == "mxfp4":
        grid = torch.tensor(sorted(set(abs(x) for x in lmx.E2M1_VALUES)))
    else:
        grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mag = v.abs()
    i = torch.searchsorted(grid, mag.clamp(max=float(grid[-1])), right=True).clamp(1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    exact = mag >= grid[-1]
    if mode == "trunc":
        q = lo
    else:
        mid = (lo + hi) / 2
        q = torch.where(mag > mid, hi, torch.where(mag < mid, lo, hi if mode == "away" else lo))
    q = torch.where(exact, grid[-1], q)
    return torch.copysign(q, v)


def _wrong_rules(x: torch.Tensor, fmt: str) -> dict[str, torch.Tensor]:
    """What the usual mistakes give (to name the mistake in the message)."""
    import labkit.mx as lmx

    f = lmx.get_format(fmt)
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    out = {}
    for name, scale in (
        ("log2", torch.exp2(torch.floor(torch.log2(amax)) - f.emax)),
        ("ceil", torch.exp2(torch.ceil(torch.log2(amax)) - f.emax)),
        ("amax/max", amax / f.max),
        ("no emax", torch.exp2(torch.floor(torch.log2(amax)))),
    ):
        v = (blocks / scale).clamp(-f.max, f.max)
        v = lmx.decode_e2m1(lmx.encode_e2m1(v)) if f.bits == 4 else v.to(f.torch_dtype).float()
        out[name] = (v * scale).reshape(x.shape)
    scale = _scale(blocks, f.emax)
    v = (blocks / scale).clamp(-f.max, f.max)
    for mode in ("away", "down", "trunc"):
        out[f"round {mode}"] = (_grid_round(v, fmt, mode) * scale).reshape(x.shape)
    return out


def _differences(x: torch.Tensor, got: torch.Tensor, ref: torch.Tensor, fmt: str) -> dict[str, Any]:
    """Where the attendee's values differ from the reference: how many, how many of them are ties
    or saturations, and a few examples with x / scale (what the attendee can reason about)."""
    import labkit.mx as lmx

    f = lmx.get_format(fmt)
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    scale = _scale(blocks, f.emax).expand_as(blocks).reshape(x.shape)
    v = x / scale
    bad = ~((got == ref) | (got.isnan() & ref.isnan()))
    if fmt == "mxfp4":
        ties = torch.zeros_like(bad)
        for t in E2M1_TIES:
            ties |= v.abs() == t
    else:  # E4M3: 3 mantissa bits; below 2^-6 the subnormal step 2^-9
        vv = v.abs().clamp(max=448.0)
        e = torch.floor(torch.log2(vv.clamp_min(2.0**-9)))
        ulp = torch.exp2(torch.clamp(e, min=-6.0) - 3)
        ties = (vv / ulp - torch.floor(vv / ulp)) == 0.5
    idx = bad.flatten().nonzero().flatten()[:4].tolist()
    flat = lambda t: t.flatten()  # noqa: E731
    return {
        "n": int(bad.sum()),
        "ties": int((bad & ties).sum()),
        "saturated": int((bad & (v.abs() > f.max)).sum()),
        "nan": int(got.isnan().sum()),
        "examples": [
            [float(flat(x)[i]), float(flat(v)[i]), float(flat(got)[i]), float(flat(ref)[i])] for i in idx
        ],
    }


class _ReferenceCalls:
    """Count calls to labkit's own MX quantizer (the checker's reference) while ``active``."""

    NAMES = ("quantize_mx", "dequantize", "shared_exponent", "mx_linear", "e8m0_to_float")

    def __init__(self) -> None:
        import labkit.mx as lmx
        import labkit.npu as npu
        import labkit.npu.quant as npu_quant

        self.active = False
        self.calls: dict[str, int] = {}
        targets = [(lmx, n, f"labkit.mx.{n}") for n in self.NAMES]
        targets += [
            (npu, "npu_dynamic_mx_quant", "labkit.npu.npu_dynamic_mx_quant"),
            (npu_quant, "npu_dynamic_mx_quant", "labkit.npu.npu_dynamic_mx_quant"),
        ]
        for owner, name, label in targets:
            fn = getattr(owner, name)

            def wrapped(*a: Any, __fn: Any = fn, __label: str = label, **k: Any) -> Any:
                if self.active:
                    self.calls[__label] = self.calls.get(__label, 0) + 1
                return __fn(*a, **k)

            setattr(owner, name, wrapped)


def _formats(dit: torch.nn.Module) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, m in dit.named_modules():
        if name.endswith(MXFP4_LAYERS + MXFP8_LAYERS) or hasattr(m, "quant_format"):
            out[name] = getattr(m, "quant_format", None)
    return out


def _weight_bytes(dit: torch.nn.Module, formats: dict[str, str | None]) -> tuple[float, float]:
    """(bf16 bytes, quantized bytes) of the DiT's weights, from the reference model's shapes."""
    ref = TinySana.load(sc.WEIGHTS).dit
    total_bf16 = quant = 0.0
    for name, p in ref.named_parameters():
        total_bf16 += 2.0 * p.numel()
        owner = name.rsplit(".", 1)[0]
        fmt = formats.get(owner) if name.endswith("weight") else None
        quant += _BYTES_PER_ELEMENT.get(fmt, 2.0) * p.numel()
    return total_bf16, quant


def quantize(prompt: str, seed: int, quant_types: list[str], case_seed: int) -> dict:
    """Step 3: the attendee's MX rule against labkit.mx (on unseen blocks, ties and a bf16 3-D input),
    whether it calls labkit's own quantizer, layer formats in every mode, quality of the clip."""
    import labkit.mx as lmx

    torch.set_num_threads(1)
    ref_calls = _ReferenceCalls()
    mod = import_attendee("quant_module.py")
    x = scale_rule_cases(case_seed)
    rule: dict[str, Any] = {}
    for fmt in ("mxfp4", "mxfp8"):
        ref = lmx.dequantize(lmx.quantize_mx(x, fmt), torch.float32)
        ref_calls.active = True
        try:
            got = mod.mx_quantize_dequantize(x.clone(), fmt)
            xb = x.reshape(2, 4, 128).bfloat16()
            got_b = mod.mx_quantize_dequantize(xb.clone(), fmt)
        finally:
            ref_calls.active = False
        got = torch.as_tensor(got).float()
        err = _max_err(got, ref)
        rule[fmt] = err if err == err else float("inf")  # NaN -> inf: "not equal"
        got_b = torch.as_tensor(got_b)
        ref_b = lmx.dequantize(lmx.quantize_mx(xb, fmt), torch.bfloat16)
        if got_b.dtype != torch.bfloat16 or tuple(got_b.shape) != tuple(xb.shape):
            rule[f"{fmt}_bf16"] = [str(got_b.dtype).replace("torch.", ""), list(got_b.shape), list(xb.shape)]
        elif _max_err(got_b, ref_b) > 0:
            rule[f"{fmt}_bf16"] = ["values", _max_err(got_b, ref_b)]
        if rule[fmt] > 0:
            for name, wrong in _wrong_rules(x, fmt).items():
                if got.shape == wrong.shape and _max_err(got, wrong) == 0:
                    rule[f"{fmt}_looks_like"] = name
                    break
            if got.shape == ref.shape:
                rule[f"{fmt}_diff"] = _differences(x, got, ref, fmt)
    rule["reference_calls"] = dict(ref_calls.calls)
    names = [n for n, _ in load_model().dit.named_modules() if n]
    format_rule: dict[str, dict[str, str]] = {}
    for qt in ("bf16", "a8w8", "a4w4"):
        wrong_rule = {}
        for n in names:
            want, have = expected_format(n, qt), mod.quant_format(n, qt)
            if have != want:
                wrong_rule[n] = have or "bf16"
        if wrong_rule:
            format_rule[qt] = wrong_rule
    model = load_model()
    ref_frames = generate(model, prompt, seed=seed)
    runs = {}
    for qt in quant_types:
        m = load_model()
        mod.replace_quant_module(m.dit, qt)
        formats = _formats(m.dit)
        wrong = {n: f for n, f in formats.items() if f != expected_format(n, qt)}
        frames = generate(m, prompt, seed=seed)
        bf16_bytes, q_bytes = _weight_bytes(m.dit, formats)
        d = frames.float() - ref_frames.float()
        mse = float(d.pow(2).mean())
        a, b = frames.float().flatten(), ref_frames.float().flatten()
        runs[qt] = {
            "frames": frames,
            "formats": {n: (f or "bf16") for n, f in formats.items()},
            "wrong_formats": {n: (f or "bf16") for n, f in wrong.items()},
            "psnr": 99.0 if mse == 0 else float(10 * torch.log10(torch.tensor(255.0**2 / mse))),
            "cosine": float(torch.nn.functional.cosine_similarity(a - 127.5, b - 127.5, dim=0)),
            "dit_weight_bytes_bf16": bf16_bytes,
            "dit_weight_bytes": q_bytes,
        }
    return {"rule": rule, "format_rule": format_rule, "ref": ref_frames, "runs": runs}


# -- step 4 ------------------------------------------------------------------------------------


def _staged_reference(model: TinySana, prompt: str, seed: int) -> None:
    """The checker's own one-card pipeline: each stage on the card only while it runs, the VAE
    one latent frame at a time (what the step asks for; its figures are the bar)."""
    from tinysana.sampling import denoise, encode_prompt, to_frames

    offload.to_device(model.text_encoder, "text_encoder")
    text, mask = encode_prompt(model, prompt)
    offload.to_host("text_encoder")
    offload.to_device(model.dit, "dit")
    latent = denoise(model, text, mask, seed=seed)
    offload.to_host("dit")
    offload.to_device(model.vae, "vae")
    to_frames(model.vae.decode(latent, chunk=1))
    offload.to_host("vae")


class _Watch:
    """While a session runs: which other stages' weights sit on the card while each stage runs,
    and the largest activation allocation of each stage (how deep its activations are)."""

    def __init__(self, model: TinySana, s: Any) -> None:
        self.running: str | None = None
        self.overlaps: dict[str, dict[str, int]] = {}
        self.act_depth: dict[str, int] = {}
        self._handles = []
        for tag, path in offload.STAGES.items():
            m = model.get_submodule(path)
            self._handles.append(m.register_forward_pre_hook(lambda mod, a, tag=tag: self._enter(tag, s)))
            self._handles.append(m.register_forward_hook(lambda mod, a, o: self._leave()))
        alloc = s.memory.alloc

        def watched_alloc(tag: str, nbytes: int) -> None:
            if tag == "activations" and self.running:
                self.act_depth[self.running] = max(self.act_depth.get(self.running, 0), int(nbytes))
            alloc(tag, nbytes)

        s.memory.alloc = watched_alloc

    def _enter(self, tag: str, s: Any) -> None:
        self.running = tag
        others = {t: s.memory.holds(t) for t in offload.STAGES if t != tag and s.memory.holds(t)}
        if others:
            self.overlaps.setdefault(tag, {}).update(others)

    def _leave(self) -> None:
        self.running = None

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def one_device(prompt: str, seed: int) -> dict:
    """Step 4: the attendee's one-card pipeline against the checker's staged one, on a card scaled
    from 64 GiB as the weights are (steps/04-one-device.md)."""
    torch.set_num_threads(1)
    model = load_model()
    ref = generate(model, prompt, seed=seed)
    offload.guard(model)
    with emu.session(scale=ONE_DEVICE_SCALE, measurer=False) as rs:
        watch = _Watch(model, rs)
        _staged_reference(model, prompt, seed)
    watch.remove()
    out: dict[str, Any] = {
        "ref": ref,
        "ref_peak": int(rs.report().peak_memory_bytes),
        "ref_act_depth": watch.act_depth,
    }
    mod = import_attendee("run_single_device.py")
    s = emu.session(scale=ONE_DEVICE_SCALE, measurer=False)
    watch = _Watch(model, s)
    try:
        with s:
            out["frames"] = mod.generate_on_one_device(model, prompt, seed)
    except emu.OutOfDeviceMemory as exc:
        out["oom"] = str(exc)
        out["oom_holders"] = {t: int(n) for t, n in exc.holders}
        out["oom_tag"] = exc.tag
        out["oom_requested"] = int(exc.requested)
    except offload.StageNotOnDevice as exc:
        out["not_on_device"] = str(exc)
    watch.remove()
    rep = s.report()
    out["overlaps"] = watch.overlaps
    out["act_depth"] = watch.act_depth
    out["peak"] = int(rep.peak_memory_bytes)
    out["capacity"] = int(rep.capacity_bytes)
    out["peak_by_tag"] = {k: int(v) for k, v in rep.peak_by_tag.items()}
    out["stage_bytes"] = {
        tag: offload.weight_bytes(model.get_submodule(p)) for tag, p in offload.STAGES.items()
    }
    out["left_on_device"] = {k: int(v) for k, v in s.memory.used_by_tag().items()}
    return out
