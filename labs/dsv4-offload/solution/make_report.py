"""Step 6: measure before/after on the demo prompts and write ``report.json``.

    python make_report.py

"before" is the recipe's starting point (static first-K placement, CPU experts on the main
stream); "after" adds the side stream and dynamic hot-expert residency. Beside each emulated
figure goes the talk's model of the real deployment at the same hit rate H.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from offload.harness import make_requests, serve

N_TOPICS = 4
PREFILL = 96
BEFORE: dict[str, object] = {"KT_SIDE_STREAM": 0, "KT_DYNAMIC_RESIDENT": 0}
AFTER: dict[str, object] = {"KT_SIDE_STREAM": 1, "KT_DYNAMIC_RESIDENT": 1}


def talk_tpot_ms(h: float) -> float:
    """The talk's model of DeepSeek-V4-Flash on A3 (16k context): ``cpu_moe_wall = 24.8 (1 - H)`` ms,
    of which 4.8 ms hide behind the resident experts; 36.4 ms is everything else."""
    return 36.4 + max(0.0, 24.8 * (1.0 - h) - 4.8)


def measure(overrides: dict[str, object]) -> dict[str, float]:
    out = serve(make_requests()[:N_TOPICS], PREFILL, overrides, logits=False)
    h = float(out["hit_rate"])  # type: ignore[arg-type]
    tpot = talk_tpot_ms(h)
    return {
        "H": h,
        "tpot_ms": float(out["tpot_ms"]),  # type: ignore[arg-type]
        "decode_tok_s": float(out["decode_tok_s"]),  # type: ignore[arg-type]
        "talk_tpot_ms": tpot,
        "talk_tok_s": 1000.0 / tpot,
    }


def main() -> None:
    torch.set_num_threads(1)
    before, after = measure(BEFORE), measure(AFTER)
    report: dict[str, object] = {
        "requests": {"topics": N_TOPICS, "prefill_tokens": PREFILL, "seed": 1},
        "before": {"config": BEFORE, **before},
        "after": {"config": AFTER, **after},
        "decode_speedup": after["decode_tok_s"] / before["decode_tok_s"],
        "talk_speedup": after["talk_tok_s"] / before["talk_tok_s"],
        "H_ratio": after["H"] / before["H"],
    }
    if Path("prefill.json").exists():
        report["prefill"] = json.loads(Path("prefill.json").read_text())
    Path("report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'':8} {'H':>6} {'TPOT ms':>8} {'tok/s':>7} {'talk TPOT(H)':>13} {'talk tok/s':>10}")
    for name, m in (("before", before), ("after", after)):
        print(
            f"{name:8} {m['H']:6.3f} {m['tpot_ms']:8.2f} {m['decode_tok_s']:7.1f} "
            f"{m['talk_tpot_ms']:13.1f} {m['talk_tok_s']:10.1f}"
        )
    print(f"decode speed-up {report['decode_speedup']:.2f}x (talk's model: {report['talk_speedup']:.2f}x)")
    print("wrote report.json")


if __name__ == "__main__":
    main()
