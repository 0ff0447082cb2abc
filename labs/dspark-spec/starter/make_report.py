"""Step 6: the report: lossless output, mean accepted length, first-token and per-position
acceptance, emulated TPOT of DSpark against MTP1, beside the talk's figures.

    python make_report.py      # writes report.json and prints the table
"""

from __future__ import annotations

import json

import config
from dspark.baseline import greedy_decode, mtp1_decode
from dspark.common import load_models, prefill_ms, prompts, session
from dspark.decode import dspark_decode

N = 48
TALK = {"first_token_acceptance": 0.89, "tpot_mtp1_ms": 9.83, "tpot_dspark_ms": 3.93}


def figures(runs: list[dict], block_size: int, tpot_mtp1: float, tpot_dspark: float) -> dict:
    """The report's figures from the loop's stats (``accepted``/``drafted`` per iteration):
    ``mean_accepted``, ``first_token_acceptance``, ``per_position_acceptance`` (one per block
    position) and ``tpot_ratio`` (how many times faster than MTP1)."""
    # TODO(step 6)
    raise NotImplementedError("figures")


def main() -> None:
    target, drafter, tok = load_models()
    ps = prompts(tok, seed=0, n=4)
    runs, mtp_ms, dsp_ms, lossless = [], 0.0, 0.0, True
    for p in ps:
        ref = greedy_decode(target, p, N)
        pre = prefill_ms(target, p)
        with session() as s:
            mtp1_decode(target, p, N)
            mtp_ms += (s.elapsed_ms() - pre) / N / len(ps)
        with session() as s:
            toks, stats = dspark_decode(target, drafter, p, N, config.TAU)
            dsp_ms += (s.elapsed_ms() - pre) / N / len(ps)
        lossless = lossless and toks == ref
        runs.append(stats)
    f = figures(runs, drafter.block_size, mtp_ms, dsp_ms)
    report = {
        "prompts": ps,
        "n": N,
        "tau": config.TAU,
        "lossless": lossless,
        **f,
        "tpot_mtp1_ms": mtp_ms,
        "tpot_dspark_ms": dsp_ms,
        "talk": {**TALK, "tpot_ratio": TALK["tpot_mtp1_ms"] / TALK["tpot_dspark_ms"]},
    }
    with open("report.json", "w") as fh:
        json.dump(report, fh, indent=1)
    t = report["talk"]
    print(f"{'':28}{'this lab (emulated 950DT)':>28}{'talk':>12}")
    print(f"{'lossless (= greedy)':28}{str(lossless):>28}{'yes':>12}")
    print(
        f"{'first-token acceptance':28}{f['first_token_acceptance']:>28.1%}{t['first_token_acceptance']:>12.0%}"
    )
    print(f"{'mean accepted length':28}{f['mean_accepted']:>28.2f}{'-':>12}")
    print(f"{'TPOT MTP1 (ms)':28}{mtp_ms:>28.4f}{t['tpot_mtp1_ms']:>12.2f}")
    print(f"{'TPOT DSpark (ms)':28}{dsp_ms:>28.4f}{t['tpot_dspark_ms']:>12.2f}")
    print(f"{'speed-up vs MTP1':28}{f['tpot_ratio']:>27.2f}x{t['tpot_ratio']:>11.2f}x")
    print("per-position acceptance:", " ".join(f"{x:.2f}" for x in f["per_position_acceptance"]))


if __name__ == "__main__":
    main()
