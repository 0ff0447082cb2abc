"""Step 4: tril_inverse gives (I + A)^-1 of held-out strictly lower A, built from 8x8 leaves and
merged 8 -> 16 -> 32 with products on the Cube (the emulator's record of the matmuls says how)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kdacheck as kc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "Invert the diagonal 8x8 blocks of I + A by forward substitution (row i from rows < i of the lower triangle), "
    "then merge pairs: [[X1, 0], [A21, X2]]^-1 = [[X1, 0], [-X2 A21 X1, X2]], two Cube products per merge.",
    "用前向替换求 I + A 对角线上 8x8 块的逆（第 i 行由下三角中 i 之前的行得到），然后两两合并："
    "[[X1, 0], [A21, X2]]^-1 = [[X1, 0], [-X2 A21 X1, X2]]，每次合并做两次 Cube 乘法。",
)


def kda_a(seed: int, C: int) -> torch.Tensor:
    """An A as the KDA operator builds it: beta_c sum_d k_cd k_id exp(g_cd - g_id), c > i."""
    x, _ = kc.inputs(seed, 1, C)
    k, g, b = x["k"][0], x["g"][0].cumsum(0), x["beta"][0]
    return torch.tril(b[:, None] * ((k * g.exp()) @ (k * (-g).exp()).T), -1)


def check() -> tuple[str, dict[str, float]]:
    s = kc.run_seed("inverse")
    gen = torch.Generator().manual_seed(s)
    cases = [
        ("KDA", kda_a(s, 64)),
        ("random", torch.tril(0.3 * torch.randn(64, 64, generator=gen, dtype=torch.float64), -1)),
        ("C=32", kda_a(s + 1, 32)),
        ("C=16", kda_a(s + 2, 16)),
    ]
    err = 0.0
    rep: dict = {}
    for label, a in cases:
        C = a.shape[0]
        res = kc.call(kc.HARNESS, "run_inverse", a.float(), hint=HINT, timeout=20)
        ref = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + a.float().double())
        what = msg(f"tril_inverse ({label} A, {C}x{C})", f"tril_inverse（{label} A，{C}x{C}）")
        err = max(
            err,
            kc.compare(
                "(I + A)^-1",
                res["out"],
                ref,
                what,
                HINT,
                ("torch.linalg.inv(I + A)", "torch.linalg.inv(I + A)"),
            ),
        )
        r = res["report"]
        ms = r["matmul_m"]
        want = [m for m in (8, 16, 32) if m < C]
        if not ms:
            raise Failure(
                msg(
                    f"{what}: the inverse is right, but no product ran on the Cube: the step builds it from 8x8 leaves "
                    "merged hierarchically with matrix products, not by forward substitution over the whole triangle.",
                    f"{what}：逆矩阵正确，但 Cube 上没有任何乘法：这一步要求从 8x8 叶子块出发，用矩阵乘分层合并，"
                    "而不是对整个三角矩阵做前向替换。",
                ),
                [HINT],
            )
        if ms != want:
            raise Failure(
                msg(
                    f"{what}: the Cube products have row counts {ms}; merging 8x8 leaves 8 -> 16 -> ... gives {want}. "
                    "Are the leaves 8x8?",
                    f"{what}：Cube 乘法的行数是 {ms}；从 8x8 叶子块逐级合并 8 -> 16 -> ... 应为 {want}。叶子块是 8x8 吗？",
                ),
                [HINT],
            )
        if res["left"]:
            groups: dict[tuple[str, str], list[int]] = {}
            for n, b, nb in res["left"]:
                auto = re.fullmatch(r"([a-z_]+)\d+", n)  # the emulator's own names: neg0, neg1, ... as one
                groups.setdefault((auto.group(1) if auto else n, b), []).append(nb)
            tiles = ", ".join(
                f"'{n}'{f' x{len(v)}' if len(v) > 1 else ''} ({b}, {sum(v) / 1024:.2f} KiB)"
                for (n, b), v in groups.items()
            )
            total = sum(nb for _, _, nb in res["left"]) / 1024
            raise Failure(
                msg(
                    f"{what}: the inverse is right, but tril_inverse returns with tiles it no longer needs still allocated: "
                    f"{tiles}, {total:.2f} KiB in all. They stay until the task ends, and in step 5 the inverse runs inside "
                    "a task that fills most of the 184 KiB UB: free each temporary (k.free) once it is used.",
                    f"{what}：逆矩阵正确，但 tril_inverse 返回时仍占着不再需要的块：{tiles}，共 {total:.2f} KiB。"
                    "它们会一直占用到任务结束，而第 5 步中求逆所在的任务几乎占满 184 KiB 的 UB：每个临时块用完就要释放（k.free）。",
                ),
                [HINT],
            )
        if C == 64:
            rep = r
    return (
        msg(
            f"tril_inverse is right (max abs error {err:.2g}) and built the talk's way: 8x8 leaves, merges of {rep['matmul_m']} "
            f"on the Cube ({rep['matmuls']} products, Cube share {rep['cube_share']:.0%}, {rep['time_us']:.1f} µs emulated for 64x64).",
            f"tril_inverse 正确（最大绝对误差 {err:.2g}），且按演讲的方法构建：8x8 叶子块，在 Cube 上合并 {rep['matmul_m']}"
            f"（{rep['matmuls']} 次乘法，Cube 占比 {rep['cube_share']:.0%}，64x64 仿真耗时 {rep['time_us']:.1f} µs）。",
        ),
        {"max_abs_error": err, "matmuls": rep["matmuls"], "cube_share": rep["cube_share"]},
    )


main(check)
