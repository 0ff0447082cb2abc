"""Figures for the dspark-spec lab from its reference solution, beside the talk's.

Greedy decoding, MTP1 and DSpark (block draft + correction + confidence filter + one verify pass)
on unseen prompts: lossless check against the target's greedy decode, first-token acceptance,
per-position acceptance, mean accepted length, emulated TPOT of each and the DSpark/MTP1 ratio,
for a few thresholds. All times are labkit.emu emulated (950DT, graph mode, toy scale), so they
are the same on any machine; the talk's figures (89%, 9.83 -> 3.93 ms) are from the talk.

    .venv/bin/python bench/dspark.py [--prompts 12] [--tokens 48]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "labs" / "dspark-spec"
HELDOUT_SEED = 4242
TALK_FIRST, TALK_MTP1, TALK_DSPARK = 0.89, 9.83, 3.93


def workspace() -> Path:
    """starter/ with the solution overlaid, in a temporary folder (as the selftest builds it)."""
    ws = Path(tempfile.mkdtemp(prefix="bench-dspark-")) / "dspark-spec"
    shutil.copytree(LAB / "starter", ws)
    shutil.copytree(LAB / "solution", ws, dirs_exist_ok=True)
    return ws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    ws = workspace()
    sys.path.insert(0, str(ws))
    import config
    from dspark.baseline import greedy_decode, mtp1_decode
    from dspark.common import load_models, prefill_ms, prompts, session
    from dspark.decode import dspark_decode
    from make_report import figures

    target, drafter, tok = load_models()
    ps = prompts(tok, seed=HELDOUT_SEED, n=args.prompts)
    n = args.tokens
    refs = [greedy_decode(target, p, n) for p in ps]
    pre = [prefill_ms(target, p) for p in ps]

    def tpot(run) -> tuple[float, list[dict], bool]:
        ms, stats, same = 0.0, [], True
        for p, r, t0 in zip(ps, refs, pre, strict=True):
            with session() as s:
                toks, st = run(p)
                ms += (s.elapsed_ms() - t0) / n / len(ps)
            stats.append(st)
            same = same and toks == r
        return ms, stats, same

    g_ms, _, _ = tpot(lambda p: (greedy_decode(target, p, n), {}))
    m_ms, m_stats, m_same = tpot(lambda p: mtp1_decode(target, p, n))
    m_acc = [a for st in m_stats for a in st["accepted"]]
    print(f"{args.prompts} unseen prompts x {n} tokens, emulated 950DT (graph mode)\n")
    print(f"greedy     TPOT {g_ms:.4f} ms")
    print(f"MTP1       TPOT {m_ms:.4f} ms   acceptance {sum(m_acc) / len(m_acc):.0%}   lossless {m_same}")
    print()
    taus = sorted({0.0, 0.3, 0.5, 0.7, 0.9, float(config.TAU)})
    print(
        f"{'tau':>5} {'TPOT ms':>9} {'vs MTP1':>8} {'first':>6} {'mean acc':>9}  per-position acceptance   lossless"
    )
    chosen = None
    for tau in taus:
        d_ms, d_stats, d_same = tpot(lambda p, tau=tau: dspark_decode(target, drafter, p, n, tau))
        f = figures(d_stats, drafter.block_size, m_ms, d_ms)
        mark = " <- config.TAU" if tau == config.TAU else ""
        print(
            f"{tau:5.2f} {d_ms:9.4f} {f['tpot_ratio']:7.2f}x {f['first_token_acceptance']:6.0%} "
            f"{f['mean_accepted']:9.2f}  {' '.join(f'{x:.2f}' for x in f['per_position_acceptance'])}   {d_same}{mark}"
        )
        if tau == config.TAU:
            chosen = (d_ms, f)
    assert chosen is not None
    d_ms, f = chosen
    print()
    print(f"{'':26}{'this lab':>12}{'talk':>10}")
    print(f"{'first-token acceptance':26}{f['first_token_acceptance']:>12.0%}{TALK_FIRST:>10.0%}")
    print(f"{'TPOT MTP1 (ms)':26}{m_ms:>12.4f}{TALK_MTP1:>10.2f}")
    print(f"{'TPOT DSpark (ms)':26}{d_ms:>12.4f}{TALK_DSPARK:>10.2f}")
    print(f"{'speed-up vs MTP1':26}{f['tpot_ratio']:>11.2f}x{TALK_MTP1 / TALK_DSPARK:>9.2f}x")
    print(f"{'per-position acceptance':26}  {' '.join(f'{x:.2f}' for x in f['per_position_acceptance'])}")


if __name__ == "__main__":
    main()
