"""Step 6: decode_tile equals the recurrent golden token after token (talk shape 32 x 4 and an odd
13 x 3), runs as one subgraph with no M=1 product on the Cube, and beats the naive decode op."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kdacheck as kc  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

MIN_SPEEDUP = 2.5
TALK = 5.8
HINT = msg(
    "One loop over every (sequence, head) pair, one subgraph doing the whole token on the Vector core: decay, "
    "k.S and q.S as broadcast multiply + sum, the update, and S written back. N*H need not be a multiple of your tile.",
    "对所有（序列，头）对只用一层循环，一个子图在 Vector 核上完成整个 token：衰减、用广播乘 + 求和计算 k.S 与 q.S、"
    "状态更新，并写回 S。N*H 不一定是你的分块大小的整数倍。",
)


def check() -> tuple[str, dict[str, float]]:
    s = kc.run_seed("decode")
    err = 0.0
    talk_rep: dict = {}
    base = 0.0
    for N, H, T in ((32, 4, 2), (13, 3, 3)):
        x, x32 = kc.inputs(s + N, N * H, T)
        ref_o, ref_s = kc.golden(x)
        scale = x["q"].shape[-1] ** -0.5
        toks = kc.decode_tokens(x32, N, H)
        s0 = x32["s0"].reshape(N, H, *x32["s0"].shape[1:]).contiguous()
        res = kc.call(kc.HARNESS, "run_decode", toks, s0, scale, hint=HINT)
        what = msg(
            f"decode_tile (N={N} sequences, H={H} heads, {T} tokens)",
            f"decode_tile（N={N} 条序列，H={H} 个头，{T} 个 token）",
        )
        got_o = res["o"].reshape(T, N * H, -1).transpose(0, 1) if hasattr(res["o"], "reshape") else res["o"]
        err = max(
            err,
            kc.compare("o", got_o, ref_o, what, HINT),
            kc.compare("S", res["s"].reshape(ref_s.shape), ref_s, what, HINT),
        )
        rep = res["report"]
        if 1 in rep["matmul_m"]:
            raise Failure(
                msg(
                    f"{what}: right, but k.S / q.S still run as M=1 matmuls on the Cube (padded to 16 rows, with moves to and from "
                    "the Cube): do them on the Vector core as broadcast multiply + sum.",
                    f"{what}：结果正确，但 k.S / q.S 仍是 Cube 上 M=1 的矩阵乘（补齐到 16 行，还要在 Cube 与 Vector 之间来回搬运）："
                    "请在 Vector 核上用广播乘 + 求和完成。",
                ),
                [HINT],
            )
        if rep["subgraphs"] != 1:
            raise Failure(
                msg(
                    f"{what}: right, but a token takes {rep['subgraphs']} subgraphs ({rep['tasks']} tasks); merge them into one.",
                    f"{what}：结果正确，但一个 token 用了 {rep['subgraphs']} 个子图（{rep['tasks']} 个任务）；请合并为一个。",
                ),
                [HINT],
            )
        if N == 32:
            talk_rep = rep
            base = kc.naive_decode_us(toks[-1], s0, scale)
    speed = base / talk_rep["time_us"]
    if speed < MIN_SPEEDUP:
        raise Failure(
            msg(
                f"decode_tile is right, but {talk_rep['time_us']:.1f} µs emulated vs {base:.1f} µs naive is only {speed:.2f}x "
                f"(at most {talk_rep['max_parallel']} tasks at once); the step needs >= {MIN_SPEEDUP}x.",
                f"decode_tile 结果正确，但仿真耗时 {talk_rep['time_us']:.1f} µs，朴素算子 {base:.1f} µs，只有 {speed:.2f}x"
                f"（同时最多 {talk_rep['max_parallel']} 个任务）；本步要求 >= {MIN_SPEEDUP}x。",
            ),
            [HINT],
        )
    return (
        msg(
            f"decode_tile equals the reference token after token (max abs error {err:.2g}). 32 sequences x 4 heads: "
            f"{base:.1f} -> {talk_rep['time_us']:.1f} µs = {speed:.2f}x emulated (talk: 209 -> 36 µs, {TALK}x); "
            f"{talk_rep['tasks']} tasks in 1 subgraph, up to {talk_rep['max_parallel']} at once, utilisation "
            f"{talk_rep['utilisation']:.0%}.",
            f"decode_tile 逐 token 与参考一致（最大绝对误差 {err:.2g}）。32 条序列 x 4 个头：{base:.1f} -> "
            f"{talk_rep['time_us']:.1f} µs，仿真加速 {speed:.2f}x（演讲：209 -> 36 µs，{TALK}x）；1 个子图共 "
            f"{talk_rep['tasks']} 个任务，最多 {talk_rep['max_parallel']} 个并行，利用率 {talk_rep['utilisation']:.0%}。",
        ),
        {
            "speedup": speed,
            "time_us": talk_rep["time_us"],
            "naive_us": base,
            "tasks": talk_rep["tasks"],
            "max_abs_error": err,
        },
    )


main(check)
