"""Trusted harness run in one child by ``labkit.check.run_function`` (never in the checker):
imports the attendee's plan.py / prefetch.py and evaluates the checker's cases in one go."""

from __future__ import annotations

import importlib
from typing import Any


def plan_cases(decode: list[tuple], prefill: list[tuple], tpot: list[tuple]) -> dict[str, Any]:
    plan = importlib.import_module("plan")
    return {
        "decode": [plan.check_decode(*c) for c in decode],
        "prefill": [plan.check_prefill(*c) for c in prefill],
        "tpot": [float(plan.tpot_ms(*c)) for c in tpot],
    }


def prefetch_cases(cases: list[tuple]) -> dict[str, Any]:
    from labkit.longcat import decode_ops

    pf = importlib.import_module("prefetch")
    plans = []
    for cards, dp, ep, batch, context in cases:
        ops = decode_ops(dp, ep, batch, context, tp=cards // dp)
        plans.append([(int(p.host), int(p.target), float(p.bytes)) for p in pf.plan_prefetch(ops)])
    return {"plans": plans, "report": pf.report(cases)}
