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
from tinysana import layers, offload, profiler  # noqa: E402
from tinysana.model import TinySana  # noqa: E402
from tinysana.sampling import generate  # noqa: E402

#: the emulated card of step 4: 64 GiB scaled to 832 KiB (see steps/04-one-device.md)
ONE_DEVICE_SCALE = 832 / (64 * 1024 * 1024)


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


class _CountCalls:
    """Wrap labkit.npu functions (before the attendee imports them) to count their calls."""

    def __init__(self, names: list[str]) -> None:
        import labkit.npu as npu

        self.counts = dict.fromkeys(names, 0)
        for name in names:
            fn = getattr(npu, name)

            def wrapped(*a: Any, __fn: Any = fn, __name: str = name, **k: Any) -> Any:
                self.counts[__name] += 1
                return __fn(*a, **k)

            setattr(npu, name, wrapped)


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


def fused_ops(prompt: str, seed: int) -> dict:
    """Step 2: reference vs patched clip, per-op errors, fused-op counts, emulated times."""
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
    g = torch.Generator().manual_seed(1)
    norm = layers.RMSNorm(32)
    norm.weight.data = torch.rand(32, generator=g) + 0.5
    x = torch.randn(2, 3, 7, 32, generator=g)
    freqs = layers.rope_freqs(2, 2, 4, 32)
    q, k, v = (torch.randn(2, 2, 16, 32, generator=g) for _ in range(3))
    qk, kk, vk = (
        torch.randn(2, 2, 5, 32, generator=g),
        torch.randn(2, 2, 8, 32, generator=g),
        torch.randn(2, 2, 8, 32, generator=g),
    )
    mask = torch.zeros(2, 1, 5, 8, dtype=torch.bool)
    mask[0, ..., 6:] = True
    conv = layers.PointwiseConv2d(32, 48)
    xc = torch.randn(3, 32, 4, 4, generator=g)
    with torch.no_grad():
        units = {
            "rms_norm": _max_err(now["rms_norm"](norm, x), orig["rms_norm"](norm, x)),
            "rope": _max_err(now["rope"](q, freqs), orig["rope"](q, freqs)),
            "rope_vs_half": _max_err(now["rope"](q, freqs), _rope_half(q, freqs)),
            "attention": _max_err(now["attention"](qk, kk, vk, mask), orig["attention"](qk, kk, vk, mask)),
            "conv1x1": _max_err(now["conv1x1"](conv, xc), orig["conv1x1"](conv, xc)),
        }
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


def scale_rule_cases() -> torch.Tensor:
    """Blocks that tell scale rules apart: exact powers of two, values just under one, values that
    saturate, tiny and zero blocks, and random data."""
    g = torch.Generator().manual_seed(3)
    rows = [
        torch.full((32,), 4.0),
        torch.linspace(-7.9, 7.9, 32),
        torch.linspace(-1.0, 0.999, 32) * 3.0,
        torch.randn(32, generator=g) * 1e-3,
        torch.zeros(32),
        torch.linspace(-448.0, 500.0, 32),
        torch.randn(32, generator=g) * 37.0,
        torch.tensor([6.5, -0.3] * 16),
    ]
    rows += list(torch.randn(8, 32, generator=g) * torch.logspace(-2, 2, 8)[:, None])
    return torch.stack(rows).reshape(4, 128)


def _wrong_rules(x: torch.Tensor, fmt: str) -> dict[str, torch.Tensor]:
    """What the usual mistakes give (to name the mistake in the message)."""
    import labkit.mx as lmx

    f = lmx.get_format(fmt)
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    out = {}
    for name, scale in (
        ("ceil", torch.exp2(torch.ceil(torch.log2(amax)) - f.emax)),
        ("amax/max", amax / f.max),
        ("no emax", torch.exp2(torch.floor(torch.log2(amax)))),
    ):
        v = (blocks / scale).clamp(-f.max, f.max)
        v = lmx.decode_e2m1(lmx.encode_e2m1(v)) if f.bits == 4 else v.to(f.torch_dtype).float()
        out[name] = (v * scale).reshape(x.shape)
    return out


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


def quantize(prompt: str, seed: int, quant_types: list[str]) -> dict:
    """Step 3: the attendee's MX rule against labkit.mx, layer formats, quality of the clip."""
    import labkit.mx as lmx

    torch.set_num_threads(1)
    mod = import_attendee("quant_module.py")
    x = scale_rule_cases()
    rule: dict[str, Any] = {}
    for fmt in ("mxfp4", "mxfp8"):
        ref = lmx.dequantize(lmx.quantize_mx(x, fmt), torch.float32)
        got = mod.mx_quantize_dequantize(x.clone(), fmt)
        got = torch.as_tensor(got).float()
        err = _max_err(got, ref)
        rule[fmt] = err
        if err > 0:
            for name, wrong in _wrong_rules(x, fmt).items():
                if _max_err(got, wrong) == 0:
                    rule[f"{fmt}_looks_like"] = name
        if err > 0 and got.shape == ref.shape:
            bad = ((got - ref).abs() > 0).reshape(x.shape[0], -1, 32).any(-1).nonzero()
            if len(bad):
                r, blk = (int(v) for v in bad[0])
                rule[f"{fmt}_example"] = [
                    x[r, blk * 32 : blk * 32 + 4].tolist(),
                    got[r, blk * 32 : blk * 32 + 4].tolist(),
                    ref[r, blk * 32 : blk * 32 + 4].tolist(),
                ]
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
    return {"rule": rule, "ref": ref_frames, "runs": runs}


# -- step 4 ------------------------------------------------------------------------------------


def one_device(prompt: str, seed: int) -> dict:
    """Step 4: the attendee's staged pipeline inside the small emulated card."""
    torch.set_num_threads(1)
    model = load_model()
    ref = generate(model, prompt, seed=seed)
    offload.guard(model)
    mod = import_attendee("run_single_device.py")
    out: dict[str, Any] = {"ref": ref}
    s = emu.session(scale=ONE_DEVICE_SCALE, measurer=False)
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
    rep = s.report()
    out["peak"] = int(rep.peak_memory_bytes)
    out["capacity"] = int(rep.capacity_bytes)
    out["peak_by_tag"] = {k: int(v) for k, v in rep.peak_by_tag.items()}
    out["stage_bytes"] = {
        tag: offload.weight_bytes(model.get_submodule(p)) for tag, p in offload.STAGES.items()
    }
    out["left_on_device"] = {k: int(v) for k, v in s.memory.used_by_tag().items()}
    return out
