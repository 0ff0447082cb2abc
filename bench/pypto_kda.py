"""Figures for the pypto-kda lab from its reference solution, beside the talk's.

Prefill (chunk_kda at Tile level) and decode (fused recurrent KDA) against the lab's naive Tile-level
versions: emulated time, speed-up, Cube share, moves, tasks, subgraphs and parallelism; plus the
tiled matmul and the (I+A)^-1 inverse. Times come from the labkit.tile cost model (910B3 profile),
so they are the same on any machine; the numerics are checked against the fp64 recurrent golden.

    .venv/bin/python bench/pypto_kda.py [--T 1024 2048 4096] [--H 1]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

LAB = Path(__file__).resolve().parents[1] / "labs" / "pypto-kda"
#: the talk's figures (reference/talks-and-hardware.md, Lab 3)
TALK_PREFILL = 3.8
TALK_DECODE = (209.0, 36.0)  # µs, 32 sequences x H=4, D=128, bf16, 910B3
TALK_DECODE_TASKS = (512, 128)
TALK_PARALLEL = (32, 128)


def workspace() -> Path:
    ws = Path(tempfile.mkdtemp(prefix="bench-pypto-")) / "pypto-kda"
    shutil.copytree(LAB / "starter", ws)
    shutil.copytree(LAB / "solution", ws, dirs_exist_ok=True)
    return ws


def row(name: str, r: dict[str, Any]) -> str:
    return (
        f"  {name:8} {r['time_us']:9.1f} µs  tasks {r['tasks']:4}  subgraphs {r['subgraphs']}  "
        f"parallel {r['max_parallel']:3}  Cube share {r['cube_share']:5.1%}  moves {r['moves']:5}  "
        f"utilisation {r['utilisation']:5.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 2048, 4096], help="prefill lengths")
    ap.add_argument("--H", type=int, default=1, help="prefill heads")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ws = workspace()
    sys.path.insert(0, str(ws))
    sys.path.insert(0, str(LAB / "checks"))
    import kda_decode
    import kda_decode_naive
    import kda_tile
    import kda_tile_naive
    import kdacheck as kc
    import tile_matmul
    from labkit import tile

    # tiled matmul
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    out = torch.zeros(512, 512)
    k = tile.Kernel("matmul")
    tile_matmul.tiled_matmul(k, a, b, out)
    r = k.report()
    print(
        f"tiled matmul 512^3 fp32, tiles {tile_matmul.TILE_M}x{tile_matmul.TILE_K}x{tile_matmul.TILE_N}: "
        f"error {float((out - a @ b).abs().max()):.2g}"
    )
    print(
        row("", r),
        f" peak L0A/L0B/L0C {r['peak_bytes']['L0A'] // 1024}/{r['peak_bytes']['L0B'] // 1024}/"
        f"{r['peak_bytes']['L0C'] // 1024} KiB",
    )

    print(
        f"\nprefill chunk_kda, H={args.H}, K=V=32, chunk 64 (talk: {TALK_PREFILL}x at T=4K, H=4, K=V=128, 910B3)"
    )
    for T in args.T:
        x, x32 = kc.inputs(7 + T, args.H, T)
        ref_o, _ = kc.golden(x)
        scale = 32**-0.5
        reps = {}
        for name, mod in (("naive", kda_tile_naive), ("tuned", kda_tile)):
            o, s = torch.zeros(args.H, T, 32), torch.zeros(args.H, 32, 32)
            k = tile.Kernel(name)
            mod.chunk_kda_tile(
                k, x32["q"], x32["k"], x32["v"], x32["g"], x32["beta"], x32["s0"], o, s, scale, 64
            )
            reps[name] = k.report()
            err = float((o.double() - ref_o).abs().max())
            print(f" T={T:5}" if name == "naive" else "        ", row(name, reps[name]), f" err {err:.1e}")
        print(
            f"        speed-up {reps['naive']['time_us'] / reps['tuned']['time_us']:.2f}x (talk {TALK_PREFILL}x)"
        )

    print(
        "\ndecode, 32 sequences x 4 heads, K=V=32, one token "
        f"(talk: {TALK_DECODE[0]:.0f} -> {TALK_DECODE[1]:.0f} µs, {TALK_DECODE[0] / TALK_DECODE[1]:.1f}x; "
        f"tasks {TALK_DECODE_TASKS[0]} -> {TALK_DECODE_TASKS[1]}; parallelism {TALK_PARALLEL[0]} -> {TALK_PARALLEL[1]})"
    )
    N, H = 32, 4
    x, x32 = kc.inputs(11, N * H, 1)
    ref_o, _ = kc.golden(x)
    tok = kc.decode_tokens(x32, N, H)[0]
    reps = {}
    for name, mod in (("naive", kda_decode_naive), ("tuned", kda_decode)):
        S = x32["s0"].reshape(N, H, 32, 32).clone()
        o = torch.zeros(N, H, 32)
        k = tile.Kernel(name)
        mod.decode_tile(k, tok["q"], tok["k"], tok["v"], tok["g"], tok["beta"], S, o, 32**-0.5)
        reps[name] = k.report()
        err = float((o.reshape(N * H, 32).double() - ref_o[:, 0]).abs().max())
        print(
            row(name, reps[name]),
            f" matmuls {reps[name]['matmuls']:3} (M {reps[name]['matmul_m']})  err {err:.1e}",
        )
    print(
        f"  speed-up {reps['naive']['time_us'] / reps['tuned']['time_us']:.2f}x "
        f"(talk {TALK_DECODE[0] / TALK_DECODE[1]:.1f}x); tasks {reps['naive']['tasks']} -> {reps['tuned']['tasks']}"
    )
    shutil.rmtree(ws.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
