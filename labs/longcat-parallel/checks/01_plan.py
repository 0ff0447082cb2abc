"""Step 1: the planner's memory per card (by part), fit verdict and reason for decode DP x EP and
prefill PP x CP plans of this run (on the HBM boundary, on every reason), and its TPOT."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import lcref as ref  # noqa: E402
from labkit.check import main, run_function  # noqa: E402
from lccheck import SINGLE, Failure, choice, fmt_gib, msg  # noqa: E402

FIX = msg("Fix plan.py.", "修改 plan.py。")
M = 2**20
REASON_TEXT = {
    "cards": msg(
        "DP and EP must divide the cards (PP x CP must equal them)",
        "DP 和 EP 必须整除卡数（PP x CP 必须等于卡数）",
    ),
    "experts": msg("EP must divide the 768 routed experts", "EP 必须整除 768 个路由专家"),
    "layers": msg("PP cannot exceed the 38 layers", "PP 不能超过 38 层"),
    "hbm": msg("the card's 64 GiB of HBM", "单卡 64 GiB 的 HBM"),
}


#: decode plan (cards, DP, EP, batch, context) whose parts add up to exactly 2**36 bytes
EXACT_HBM = (192, 32, 64, 1, 10440747)


def decode_cases() -> list[tuple[int, int, int, int, int]]:
    ctx = choice("ctx", [256 * 1024, 512 * 1024, 1024 * 1024])
    cards = choice("cards", [64, 128, 256])
    dp2 = cards // 2
    cases = []
    for dp, ep in [(cards, cards), (dp2, cards), (cards, dp2)]:
        b = max(ref.max_batch(cards, dp, ep, ctx), 1)
        cases += [
            (cards, dp, ep, b, ctx),
            (cards, dp, ep, b + 1, ctx),
        ]  # the last batch that fits, and one more
    cases += [(cards, cards, 96, 1, ctx), (160, 160, 160, 1, ctx), (cards, 3, cards, 1, ctx)]  # reasons
    # a plan whose total lies between 64e9 and 64 GiB: it fits (HBM capacity is in GiB)
    fixed = sum(ref.decode_parts(128, 128, 128, 0, 1).values())
    target = ref.CL.hbm_bytes - 0.5 * (ref.CL.hbm_bytes - 64e9)
    ctx_b = int((target - fixed) * 128 / (4 * ref.CFG.kv_bytes_per_token))
    cases.append((128, 128, 128, 4, ctx_b))
    # a plan whose total is exactly 64 GiB (every part a whole number of bytes): it fits, the HBM is
    # exceeded only above it
    cases.append(EXACT_HBM)
    return cases


def prefill_cases() -> list[tuple[int, int, int, int]]:
    ctx = choice("pctx", [512 * 1024, 1024 * 1024])
    cards = 64
    return [(cards, pp, cards // pp, ctx) for pp in (1, 2, 4, 8, 16, 32, 64)] + [
        (cards, 3, 21, ctx),
        (76, 38, 2, ctx),  # PP equal to the 38 layers is allowed (one layer a stage)
        (96, 1, 96, ctx),  # CP 96 does not divide the context: the largest shard holds ceil(context / CP)
    ]


def judge(
    kind: str, case: tuple, got: object, want: tuple[bool, str | None, dict[str, float] | None]
) -> None:
    fits, reason, parts = want
    if kind == "decode":
        cards, dp, ep, batch, ctx = case
        name = msg(
            f"decode plan on {cards} cards, DP {dp} x EP {ep}, batch {batch} x {ctx} tokens",
            f"解码方案：{cards} 张卡，DP {dp} x EP {ep}，batch {batch} x {ctx} token",
        )
    else:
        cards, pp, cp, ctx = case
        name = msg(
            f"prefill plan on {cards} cards, PP {pp} x CP {cp}, {ctx} tokens",
            f"预填充方案：{cards} 张卡，PP {pp} x CP {cp}，{ctx} token",
        )
    if not isinstance(got, dict):
        raise Failure(
            msg(
                f"check_{kind}() returned {got!r}, not a dict.", f"check_{kind}() 返回了 {got!r}，不是字典。"
            ),
            [FIX],
        )

    def verdict() -> None:
        """A Failure when fits / reason differ from the checker's."""
        if got.get("fits") is fits and got.get("reason") == reason:
            return
        total = sum(parts.values()) if parts else None
        tot = (
            msg(
                f" (total {fmt_gib(total)} against {fmt_gib(ref.CL.hbm_bytes)})",
                f"（合计 {fmt_gib(total)}，容量 {fmt_gib(ref.CL.hbm_bytes)}）",
            )
            if total
            else ""
        )
        why = REASON_TEXT[reason] if reason else msg("it fits", "它放得下")
        unit = ""
        if reason is None and got.get("reason") == "hbm" and total == ref.CL.hbm_bytes:
            unit = msg(
                " The total is exactly 64 GiB: a plan is rejected only when its total exceeds the HBM.",
                " 合计恰好 64 GiB：只有合计超过 HBM 时方案才被拒绝。",
            )
        elif reason is None and got.get("reason") == "hbm" and total and total > 64e9:
            unit = msg(
                " The HBM is 64 GiB = 68.7e9 bytes, not 64e9.", " HBM 是 64 GiB = 68.7e9 字节，不是 64e9。"
            )
        elif got.get("reason") == "layers" and kind == "prefill" and case[1] <= ref.CFG.n_layers:
            unit = msg(
                f" PP {case[1]} does not exceed the {ref.CFG.n_layers} layers (a stage of one layer is fine).",
                f" PP {case[1]} 没有超过 {ref.CFG.n_layers} 层（一个阶段只有一层也可以）。",
            )
        raise Failure(
            msg(
                f"{name}: you say fits={got.get('fits')!r}, reason={got.get('reason')!r}; expected fits={fits}, reason={reason!r}: {why}{tot}.{unit}",
                f"{name}：你的结果是 fits={got.get('fits')!r}，reason={got.get('reason')!r}；应为 fits={fits}，reason={reason!r}：{why}{tot}。{unit}",
            ),
            [FIX],
        )

    if got.get("reason") in ("cards", "experts", "layers") and got.get("reason") != reason:
        verdict()  # a rule-based rejection returns no bytes: say which rule, not that bytes are missing
    if parts is not None:
        gparts = got.get("bytes")
        if not isinstance(gparts, dict):
            raise Failure(
                msg(
                    f"{name}: check_{kind}() must return the bytes per card by part under 'bytes'.",
                    f"{name}：check_{kind}() 必须在 'bytes' 下返回每张卡按部分划分的字节数。",
                ),
                [FIX],
            )
        for part, n in parts.items():
            g = gparts.get(part)
            if not isinstance(g, int | float) or abs(g - n) > 1e-6 * max(n, 1.0) + 1:
                shown = fmt_gib(g) if isinstance(g, int | float) else repr(g)
                want = fmt_gib(n)
                shown_zh, want_zh = shown, want
                if shown == want:  # too close for GiB: in bytes
                    shown, want = f"{g:.0f} bytes", f"{n:.0f} bytes"
                    shown_zh, want_zh = f"{g:.0f} 字节", f"{n:.0f} 字节"
                raise Failure(
                    msg(
                        f"{name}: '{part}' is {shown} per card, the checker computes {want} = {ref.PART_RULE[kind][part]}.",
                        f"{name}：'{part}' 每卡为 {shown_zh}，检查器算出 {want_zh} = {ref.PART_RULE[kind][part]}。",
                    ),
                    [FIX],
                )
    verdict()


def check() -> tuple[str, dict[str, float]]:
    dec, pre = decode_cases(), prefill_cases()
    fitting = [c for c in dec if ref.decode_verdict(*c)[0]]
    tp_cases = fitting[:3]
    got = run_function(SINGLE, "plan_cases", dec, pre, tp_cases, timeout=60).unwrap(FIX)
    for c, g in zip(dec, got["decode"], strict=True):
        judge("decode", c, g, ref.decode_verdict(*c))
    for c, g in zip(pre, got["prefill"], strict=True):
        judge("prefill", c, g, ref.prefill_verdict(*c))
    for c, g in zip(tp_cases, got["tpot"], strict=True):
        want = ref.tpot_ms(*c)
        no_link = (
            sum(
                d
                for d, op in zip(
                    ref.timeline(ref.decode_ops(c[1], c[2], c[3], c[4], tp=c[0] // c[1])).durations,
                    ref.decode_ops(c[1], c[2], c[3], c[4], tp=c[0] // c[1]),
                    strict=True,
                )
                if op.engine != "link"
            )
            * 1e3
        )
        if abs(g - want) > 1e-6 * want:
            hint = msg(
                " That is the device ops only: the dispatch / combine / gather link ops are part of the step too."
                if abs(g - no_link) < 1e-6 * want
                else "",
                " 这只是设备算子：dispatch / combine / gather 这些链路算子也是一步的一部分。"
                if abs(g - no_link) < 1e-6 * want
                else "",
            )
            raise Failure(
                msg(
                    f"TPOT of decode plan {c}: you say {g:.4f} ms, the emulated timeline gives {want:.4f} ms.{hint}",
                    f"解码方案 {c} 的 TPOT：你的结果是 {g:.4f} ms，仿真时间线给出 {want:.4f} ms。{hint}",
                ),
                [FIX],
            )
    c0 = fitting[0]
    c0 = (*c0[:3], ref.max_batch(c0[0], c0[1], c0[2], c0[4]), c0[4])
    return msg(
        f"The planner agrees on {len(dec)} decode and {len(pre)} prefill plans (every reason, the HBM boundary); "
        f"e.g. {c0[0]} cards DP {c0[1]} x EP {c0[2]} holds at most {c0[3]} sequences of {c0[4]} tokens, TPOT {ref.tpot_ms(*c0):.2f} emulated ms (talk: 20 ms).",
        f"规划器在 {len(dec)} 个解码方案和 {len(pre)} 个预填充方案上都正确（覆盖每种拒绝原因和 HBM 边界）；"
        f"例如 {c0[0]} 张卡 DP {c0[1]} x EP {c0[2]} 最多容纳 {c0[3]} 条 {c0[4]} token 的序列，TPOT {ref.tpot_ms(*c0):.2f} 仿真毫秒（演讲：20 ms）。",
    ), {"max_batch": c0[3], "tpot_ms": ref.tpot_ms(*c0)}


if __name__ == "__main__":
    main(check)
