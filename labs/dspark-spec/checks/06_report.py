"""Step 6: the report. figures() must follow the definitions (checked on fixed stats), and every
figure in report.json is recomputed here from the attendee's loop on the report's prompts (the
seed-0 prompts of the pristine starter, regenerated here): lossless output, mean accepted length,
first-token and per-position acceptance, TPOT of DSpark and MTP1 and their ratio."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsparkcheck as dc  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "make_report.py: figures() counts over every iteration of every run; mean_accepted counts drafted tokens that "
    "passed (not the target's own token); first_token_acceptance is the share of iterations whose first drafted token "
    "passed; per-position acceptance j is conditional on reaching position j; tpot_ratio = TPOT(MTP1) / TPOT(DSpark).",
    "make_report.py：figures() 对所有运行的每一轮计数；mean_accepted 只数通过验证的草稿 token（不含目标模型自己的 token）；"
    "first_token_acceptance 是首个草稿 token 通过的轮次占比；位置 j 的接受率以到达位置 j 为条件；"
    "tpot_ratio = TPOT(MTP1) / TPOT(DSpark)。",
)
K = 7
FIXED = [
    {"accepted": [7, 0, 3, 7, 2, 0], "drafted": [7, 3, 5, 7, 2, 1]},
    {"accepted": [1, 4, 0], "drafted": [7, 7, 2]},
]
# and stats where no iteration reaches positions 5-7 (blocks of at most 4, never all passed at 3-4):
# a share of no iterations is 0 (what the report of a high tau shows there), not 1 and not 0 / 0
SHORT = [{"accepted": [2, 0, 1], "drafted": [4, 2, 3]}, {"accepted": [0, 3], "drafted": [1, 4]}]
N = 48


def ref_figures(runs: list[dict], tpot_mtp1: float, tpot_dspark: float) -> dict:
    acc = [a for r in runs for a in r["accepted"]]
    dr = [d for r in runs for d in r["drafted"]]
    per = []
    for j in range(1, K + 1):
        reached = sum(1 for a, d in zip(acc, dr, strict=True) if d >= j and a >= j - 1)
        per.append(
            sum(1 for a, d in zip(acc, dr, strict=True) if d >= j and a >= j) / reached if reached else 0.0
        )
    return {
        "mean_accepted": sum(acc) / len(acc),
        "first_token_acceptance": sum(1 for a in acc if a) / len(acc),
        "per_position_acceptance": per,
        "tpot_ratio": tpot_mtp1 / tpot_dspark,
    }


def same(a: object, b: object, rel: float) -> bool:
    if isinstance(b, list):
        return (
            isinstance(a, list)
            and len(a) == len(b)
            and all(same(x, y, rel) for x, y in zip(a, b, strict=True))
        )
    return isinstance(a, (int, float)) and math.isfinite(a) and abs(a - b) <= rel * max(abs(b), 1e-9) + 1e-9


NAMES = {
    "mean_accepted": ("mean accepted length", "平均接受长度"),
    "first_token_acceptance": ("first-token acceptance", "首 token 接受率"),
    "per_position_acceptance": ("per-position acceptance", "逐位置接受率"),
    "tpot_ratio": ("TPOT ratio", "TPOT 比值"),
    "tpot_mtp1_ms": ("MTP1 TPOT", "MTP1 TPOT"),
    "tpot_dspark_ms": ("DSpark TPOT", "DSpark TPOT"),
}


def check() -> tuple[str, dict[str, float]]:
    cases = [(FIXED, K, 0.3, 0.15), (SHORT, K, 0.25, 0.2)]
    for (stats, _, mtp, dsp), got in zip(cases, dc.call("figures_each", cases, hint=HINT), strict=True):
        for key, val in ref_figures(stats, mtp, dsp).items():
            if not same(got.get(key), val, 1e-9):
                en, zh = NAMES[key]
                raise Failure(
                    msg(
                        f"figures(): {en} is {got.get(key)} for stats {stats}; by its definition it is {val}"
                        + (
                            " (0 where no iteration reached the position)."
                            if key == "per_position_acceptance"
                            else "."
                        ),
                        f"figures()：对 stats {stats}，{zh} 为 {got.get(key)}；按定义应为 {val}"
                        + ("（没有任何轮次到达的位置为 0）。" if key == "per_position_acceptance" else "。"),
                    ),
                    [HINT],
                )
    rep = dc.read_json("report.json", msg("Run `python make_report.py`.", "运行 `python make_report.py`。"))
    sys.path.insert(0, str(dc.LAB_SRC))
    from dspark.common import prompts  # the pristine starter's, on the server

    _, _, tok = dc.models()
    ps = prompts(tok, seed=0, n=4)
    tau = rep.get("tau")
    if not isinstance(tau, (int, float)):
        raise Failure(msg("report.json has no tau.", "report.json 里没有 tau。"), [HINT])
    # MTP1 and the loop in one child (the report needs no greedy run: the checker proves the
    # loop's output lossless itself); figures() above ran in a child of its own, so nothing
    # make_report.py does on import can reach these runs
    got = dc.call("report_runs", dc.WEIGHTS, ps, N, float(tau), hint=HINT, timeout=120)
    base, runs = got["mtp1"], got["dspark"]
    ties = 0
    for p, r in zip(ps, runs, strict=True):
        ties += dc.expect_greedy(r["tokens"], p, N, "dspark_decode()", HINT)[0]
    mtp = sum(b["mtp1_ms"] for b in base) / len(ps)
    dsp = sum(r["tpot_ms"] for r in runs) / len(ps)
    truth = {**ref_figures(runs, mtp, dsp), "tpot_mtp1_ms": mtp, "tpot_dspark_ms": dsp}
    if rep.get("lossless") is not True:
        raise Failure(
            msg("report.json says the output is not lossless.", "report.json 显示输出不是无损的。"), [HINT]
        )
    for key, val in truth.items():
        if not same(rep.get(key), val, 1e-3):
            en, zh = NAMES[key]
            raise Failure(
                msg(
                    f"report.json: {en} is {rep.get(key)}, but your loop on the report's prompts gives {val} "
                    "(recomputed here). Report what you measured, and re-run `python make_report.py` after a change.",
                    f"report.json：{zh} 为 {rep.get(key)}，但你的循环在报告的提示词上给出 {val}（在此重新计算）。"
                    "报告你测到的结果，修改后重新运行 `python make_report.py`。",
                ),
                [HINT],
            )
    t = truth
    return msg(
        f"Lossless on the report's prompts; first-token acceptance {t['first_token_acceptance']:.0%} (talk 89%), mean accepted "
        f"length {t['mean_accepted']:.2f} of {K}, emulated TPOT {mtp:.4f} ms (MTP1) -> {dsp:.4f} ms (DSpark), "
        f"{t['tpot_ratio']:.2f}x (talk 9.83 -> 3.93 ms, {9.83 / 3.93:.2f}x).",
        f"在报告的提示词上无损；首 token 接受率 {t['first_token_acceptance']:.0%}（演讲 89%），平均接受长度 "
        f"{t['mean_accepted']:.2f}/{K}，仿真 TPOT {mtp:.4f} ms（MTP1）-> {dsp:.4f} ms（DSpark），"
        f"{t['tpot_ratio']:.2f} 倍（演讲 9.83 -> 3.93 ms，{9.83 / 3.93:.2f} 倍）。",
    ), {
        "first_token_acceptance": t["first_token_acceptance"],
        "mean_accepted": t["mean_accepted"],
        "tpot_mtp1_ms": mtp,
        "tpot_dspark_ms": dsp,
        "tpot_ratio": t["tpot_ratio"],
        "near_ties": ties,
    }


main(check)
