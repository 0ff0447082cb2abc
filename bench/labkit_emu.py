"""Benchmark of labkit.emu with the shipped tiny MoE (prints figures; asserts nothing).

    .venv/bin/python bench/labkit_emu.py [--steps 48] [--repeats 5]

1. Emulation overhead: CPU time of a decode step of the tiny MoE with plain torch (no
   session) vs inside an emulation session (every op accounted), median over repeats.
2. Wall time of a 64-token greedy generation (one core).
3. Emulated time of one decode step (and of a 32-token prefill) under every profile,
   eager and graph mode, with the report's top ops for the 910B.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from labkit import emu
from labkit.models import load_tiny_moe

PROMPT = "the probe orbits mars every four days . astronauts on the station watched"


def decode_walls(model, prompt: list[int], steps: int, accounted: bool) -> list[float]:
    """CPU seconds (process time: robust to other load on the machine) of each of ``steps`` decode steps after a prefill of ``prompt``."""
    cache = model.new_cache()
    with torch.no_grad():
        logits = model(torch.tensor([prompt]), cache)
        walls = []
        for _ in range(steps):
            nxt = torch.tensor([[int(logits[0, -1].argmax())]])
            if accounted:
                with emu.session("910B", measurer=False):
                    t = time.process_time()
                    logits = model(nxt, cache)
                    walls.append(time.process_time() - t)
            else:
                t = time.process_time()
                logits = model(nxt, cache)
                walls.append(time.process_time() - t)
    return walls


def emulated_step(
    model, prompt: list[int], profile: str, graph_mode: bool
) -> tuple[float, float, emu.EmuReport]:
    """(prefill ms, decode-step ms, decode report) under ``profile``."""
    cache = model.new_cache()
    with torch.no_grad():
        with emu.session(profile, graph_mode=graph_mode, measurer=False) as s:
            logits = model(torch.tensor([prompt]), cache)
        prefill = s.elapsed_ms()
        nxt = torch.tensor([[int(logits[0, -1].argmax())]])
        with emu.session(profile, graph_mode=graph_mode, measurer=False) as s:
            model(nxt, cache)
        return prefill, s.elapsed_ms(), s.report()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load_tiny_moe()
    prompt = tok.encode(PROMPT, bos=True)
    print(f"tiny MoE: {model.num_parameters()} parameters, config {model.cfg.to_dict()}")

    decode_walls(model, prompt, 8, False)  # warm-up
    plain, accounted = [], []
    for _ in range(args.repeats):  # interleave so machine load hits both alike
        plain += decode_walls(model, prompt, args.steps, False)
        accounted += decode_walls(model, prompt, args.steps, True)
    p50, a50 = statistics.median(plain), statistics.median(accounted)
    print(f"\n1. emulation overhead, one decode step (median of {len(plain)} steps, 1 thread)")
    print(f"   plain torch        {p50 * 1e3:8.3f} ms")
    print(f"   with accounting    {a50 * 1e3:8.3f} ms   overhead {100 * (a50 / p50 - 1):+.1f} %")

    n = 20000
    with emu.session("910B", measurer=False):
        t = time.process_time()
        for _ in range(n):
            emu.account("matmul", flops=1e6, bytes=1e5, dtype="float32")
        inside = (time.process_time() - t) / n
    t = time.process_time()
    for _ in range(n):
        emu.account("matmul", flops=1e6, bytes=1e5, dtype="float32")
    outside = (time.process_time() - t) / n
    with emu.session("910B", measurer=False) as s:
        cache = model.new_cache()
        with torch.no_grad():
            model(torch.tensor([prompt]), cache)
        calls = sum(o.count for o in s.report().ops.values())
    print(
        f"   one account() call: {inside * 1e6:.2f} us in a session, {outside * 1e6:.2f} us outside; "
        f"a {len(prompt)}-token prefill makes {calls} calls"
    )

    gens, cpus = [], []
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=64)
        gens.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    print(
        f"\n2. 64-token greedy generation: {min(gens) * 1e3:.1f} ms wall, {min(cpus) * 1e3:.1f} ms CPU "
        "(best of 3, 1 thread; CPU time is what an idle core would take)"
    )
    print(f"   continuation: {tok.decode(out)[:150]} ...")

    print(f"\n3. emulated times (toy scale 2**-10; prompt of {len(prompt)} tokens, then one decode step)")
    print(
        f"   {'profile':<8} {'weights':<8} {'mode':<6} {'prefill ms':>11} {'decode ms':>10} {'tok/s':>8} {'launches':>9}"
    )
    bf16 = load_tiny_moe(dtype=torch.bfloat16)[0]
    for profile in emu.profile_names():
        for name, m in (("fp32", model), ("bf16", bf16)):
            for graph in (False, True):
                pre, dec, rep = emulated_step(m, prompt, profile, graph)
                print(
                    f"   {profile:<8} {name:<8} {'graph' if graph else 'eager':<6} {pre:>11.3f} {dec:>10.3f} "
                    f"{1e3 / dec:>8.1f} {rep.launches:>9}"
                )
    _, _, rep = emulated_step(model, prompt, "910B", False)
    print("\n   910B eager decode step, top ops:")
    for op, ms in list(rep.time_by_op().items())[:6]:
        o = rep.ops[op]
        print(
            f"     {op:<24} {o.count:>4} calls {ms:>8.3f} ms  bytes {o.bytes / 1e3:>8.1f} kB  bound {o.bound}"
        )


if __name__ == "__main__":
    main()
