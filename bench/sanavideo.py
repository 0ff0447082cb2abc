"""Figures for the sanavideo lab: sampling time, emulated time before/after fusion, weight memory
and quality (PSNR / cosine against the unquantized clip) for bf16, MXFP8 (a8w8) and A4W4, and the
one-device peak memory. Uses the lab's reference solution.

    .venv/bin/python bench/sanavideo.py [--prompts N]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

LAB = Path(__file__).resolve().parents[1] / "labs" / "sanavideo"
sys.path.insert(0, str(LAB / "checks"))

import sanacheck as sc  # noqa: E402  (puts the lab's TinySana on sys.path)
from labkit import emu  # noqa: E402
from tinysana import layers, offload, profiler  # noqa: E402
from tinysana.model import TinySana  # noqa: E402
from tinysana.prompts import all_prompts  # noqa: E402
from tinysana.sampling import generate  # noqa: E402


def solution(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"solution_{name}", LAB / "solution" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load() -> TinySana:
    return profiler.instrument(TinySana.load(sc.WEIGHTS))


def emulated(model: TinySana, prompt: str) -> tuple[float, int]:
    with emu.session(measurer=False) as s:
        generate(model, prompt)
    return s.elapsed_ms(), s.report().launches


def quality(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    mse = (a.float() - b.float()).pow(2).mean().item()
    psnr = 99.0 if mse == 0 else 10 * torch.log10(torch.tensor(255.0**2 / mse)).item()
    cos = torch.nn.functional.cosine_similarity(
        a.float().flatten() - 127.5, b.float().flatten() - 127.5, dim=0
    ).item()
    return psnr, cos


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8, help="prompts for the quality figures (of 48)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    prompt = sc.PROMPT
    model = load()
    generate(model, prompt)  # warm-up
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        generate(model, prompt)
        times.append(time.perf_counter() - t0)
    print(f"sampling (10 Euler steps, CFG, 8x32x32, 1 thread): median {statistics.median(times):.3f} s wall")

    before, n0 = emulated(model, prompt)
    saved = (
        layers.RMSNorm.forward,
        layers.apply_rotary_emb,
        layers.softmax_attention,
        layers.PointwiseConv2d.forward,
    )
    solution("npu_patches").apply_npu_patches()
    after, n1 = emulated(model, prompt)
    (
        layers.RMSNorm.forward,
        layers.apply_rotary_emb,
        layers.softmax_attention,
        layers.PointwiseConv2d.forward,
    ) = saved  # type: ignore[method-assign]
    print(
        f"emulated sampling (910B profile): {before:.2f} ms ({n0} launches) unfused -> "
        f"{after:.2f} ms ({n1} launches) fused, {before / after:.2f}x"
    )

    quant = solution("quant_module")
    prompts = all_prompts()[:: max(1, 48 // args.prompts)][: args.prompts]
    refs = {p: generate(model, p) for p in prompts}
    print(f"quality over {len(prompts)} prompts, against the unquantized (bf16-weight) clip:")
    print(
        f"  {'mode':22s} {'DiT weights':>12s} {'all weights':>12s} {'PSNR dB':>8s} {'cosine':>8s} {'shows prompt':>13s}"
    )
    total_bf16 = (
        offload.weight_bytes(model.text_encoder)
        + offload.weight_bytes(model.dit)
        + offload.weight_bytes(model.vae)
    )
    modes = [
        ("bf16", "bf16", None),
        ("MXFP8 (a8w8)", "a8w8", None),
        ("A4W4 (recipe)", "a4w4", None),
        ("MXFP4 everywhere", "a4w4", "all"),
    ]
    for label, qt, variant in modes:
        m = load()
        if qt != "bf16":
            if variant == "all":
                orig = quant.quant_format
                quant.quant_format = lambda n, q, _o=orig: "mxfp4" if _o(n, q) else None
                quant.replace_quant_module(m.dit, qt)
                quant.quant_format = orig
            else:
                quant.replace_quant_module(m.dit, qt)
        dit_bytes = 0.0
        for name, p in TinySana.load(sc.WEIGHTS).dit.named_parameters():
            fmt = (
                getattr(m.dit.get_submodule(name.rsplit(".", 1)[0]), "quant_format", None)
                if name.endswith("weight")
                else None
            )
            dit_bytes += p.numel() * {None: 2.0, "mxfp8": 1 + 1 / 32, "mxfp4": 0.5 + 1 / 32}[fmt]
        all_bytes = total_bf16 - offload.weight_bytes(model.dit) + dit_bytes
        ps, cs, ok = [], [], 0
        for p in prompts:
            out = generate(m, p)
            q = quality(out, refs[p])
            ps.append(min(q[0], 99.0))
            cs.append(q[1])
            ok += sc.mismatch(sc.analyse(out.numpy()), p) is None
        print(
            f"  {label:22s} {dit_bytes / 1024:9.0f} KiB {all_bytes / 1024:9.0f} KiB {statistics.mean(ps):8.1f} "
            f"{statistics.mean(cs):8.4f} {ok:>6d}/{len(prompts)}"
        )

    run = solution("run_single_device")
    m = offload.guard(load())
    with emu.session(scale=run.CARD_SCALE, measurer=False) as s:
        run.generate_on_one_device(m, prompt)
    rep = s.report()
    parts = ", ".join(f"{t} {n / 1024:.0f} KiB" for t, n in rep.peak_by_tag.items())
    print(
        f"one device: peak {rep.peak_memory_bytes / 1024:.0f} KiB of {rep.capacity_bytes / 1024:.0f} KiB ({parts})"
    )


if __name__ == "__main__":
    main()
