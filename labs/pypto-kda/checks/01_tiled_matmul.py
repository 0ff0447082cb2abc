"""Step 1: tiled_matmul equals a @ b on held-out shapes (not multiples of any tile), every tile
within its buffer (the emulator raises otherwise), the products on the Cube."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kdacheck as kc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "Loop over output tiles (one task each) and over K inside, accumulating into one L0C tile; the last tiles of a "
    "shape that is not a multiple of the tile are smaller.",
    "按输出块循环（每块一个任务），在任务内沿 K 循环并累加到同一个 L0C 块中；当形状不是块大小的整数倍时，最后的块更小。",
)


def check() -> tuple[str, dict[str, float]]:
    s = kc.run_seed("matmul")
    # whole tiles only; one row, one K column and one N column past whole tiles (the last tile of each
    # loop holds a single element); shapes of this run
    shapes = [(256, 256, 256), (65, 65, 129), (130 + s % 120, 150 + (s >> 8) % 150, 140 + (s >> 16) % 130)]
    rep: dict = {}
    for i, (M, K, N) in enumerate(shapes):
        gen = torch.Generator().manual_seed(s + i)
        a, b = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen)
        res = kc.call(kc.HARNESS, "run_matmul", a, b, hint=HINT)
        ref = a.double() @ b.double()
        kc.compare(
            "out",
            res["out"],
            ref,
            msg(f"tiled_matmul on {M}x{K} @ {K}x{N}", f"tiled_matmul 计算 {M}x{K} @ {K}x{N}"),
            HINT,
            ("a @ b", "a @ b"),
        )
        rep = res["report"]
        if rep["cube_share"] < 0.9:
            raise Failure(
                msg(
                    f"The product is right, but only {rep['cube_share']:.0%} of the compute time is on the Cube: a matmul "
                    "belongs on the Cube core (L0A x L0B -> L0C), the Vector core is for elementwise work.",
                    f"乘积正确，但只有 {rep['cube_share']:.0%} 的计算时间在 Cube 上：矩阵乘应放在 Cube 核上（L0A x L0B -> L0C），"
                    "Vector 核用于逐元素计算。",
                ),
                [HINT],
            )
    peak = rep["peak_bytes"]
    return (
        msg(
            f"tiled_matmul is right on {shapes[-1]} and every tile fits (peak L0A {peak['L0A'] // 1024} KiB, L0B "
            f"{peak['L0B'] // 1024} KiB, L0C {peak['L0C'] // 1024} KiB). Cube share {rep['cube_share']:.0%}, "
            f"{rep['tasks']} tasks, {rep['moves']} moves ({rep['move_bytes'] / 1024:.0f} KiB), {rep['time_us']:.1f} µs emulated.",
            f"tiled_matmul 在 {shapes[-1]} 上结果正确，每个块都放得下（峰值 L0A {peak['L0A'] // 1024} KiB、L0B "
            f"{peak['L0B'] // 1024} KiB、L0C {peak['L0C'] // 1024} KiB）。Cube 占比 {rep['cube_share']:.0%}，"
            f"{rep['tasks']} 个任务，{rep['moves']} 次搬运（{rep['move_bytes'] / 1024:.0f} KiB），仿真耗时 {rep['time_us']:.1f} µs。",
        ),
        {
            "cube_share": rep["cube_share"],
            "tasks": rep["tasks"],
            "moves": rep["moves"],
            "time_us": rep["time_us"],
        },
    )


main(check)
