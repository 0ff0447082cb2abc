"""Shared helpers of the longcat-parallel checkers (trusted side).

Attendee code runs only in children: on 4 gloo ranks through ``labkit.dist.run_ranks`` (the
harness ``lc_harness.py`` next to this file imports the attendee's module inside each rank), or
in one child through ``labkit.check.run_function`` (``lc_single.py``). Inputs are derived from
``LAB_RUN_ID``; every reference is computed here.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
torch.set_num_threads(1)

from labkit import dist as ldist  # noqa: E402
from labkit.check import Failure, msg  # noqa: E402

HARNESS = str(HERE / "lc_harness.py")
SINGLE = str(HERE / "lc_single.py")
WORLD = 4


def run_seed(salt: str = "") -> int:
    """A seed of this check run and step: inputs the attendee has not seen."""
    key = f"{os.environ.get('LAB_RUN_ID', 'no-run-id')}/{os.environ.get('LAB_STEP', '')}/{salt}"
    return 1000 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 10**6


def rng(salt: str) -> torch.Generator:
    return torch.Generator().manual_seed(run_seed(salt))


def choice(salt: str, options: list[Any]) -> Any:
    return options[run_seed(salt) % len(options)]


def ranks(
    func: str, *args: Any, file_hint: str, timeout: float = 60, **kw: Any
) -> tuple[list[Any], ldist.DistResult]:
    """Run a harness function on WORLD ranks; a hang or an attendee error is a Failure."""
    res = ldist.run_ranks(HARNESS, func, WORLD, *args, timeout=timeout, **kw)
    res = ldist.DistResult(res.ranks, res.hang, res.stdout, res.stderr, file_hint)
    return res.unwrap(), res


def a2a_elements(res: ldist.DistResult) -> tuple[int, int]:
    """(all-to-all calls, elements sent by them) over every rank, from the ranks' logs."""
    calls = elems = 0
    for r in res.ranks:
        for e in r.events:
            if e["ev"] != "enter" or e.get("op") not in ("all_to_all", "all_to_all_single"):
                continue
            calls += 1
            shapes = e.get("shapes") or []
            inp = shapes[1] if len(shapes) > 1 else []
            if inp and isinstance(inp[0], list):
                elems += sum(math.prod(s) for s in inp)
            elif inp:
                elems += math.prod(inp)
    return calls, elems


def sent_elements(res: ldist.DistResult, world: int = WORLD) -> list[int]:
    """Elements each rank handed to other ranks, from the ranks' logs: a ``send`` counts its
    tensor, an all-gather its input once for each of the world - 1 other ranks. (Other calls are
    not counted: a bound on this is never too strict.)"""
    out = []
    for r in res.ranks:
        n = 0
        for e in r.events:
            if e["ev"] not in ("enter", "issue"):
                continue
            shapes = e.get("shapes") or []
            if e.get("op") == "send" and shapes and isinstance(shapes[0], list):
                n += math.prod(shapes[0])
            elif e.get("op") in ("all_gather", "all_gather_into_tensor") and len(shapes) > 1:
                inp = shapes[1]
                if inp and isinstance(inp[0], list):
                    continue  # a list as the input is not an all-gather's tensor
                n += math.prod(inp) * (world - 1)
        out.append(n)
    return out


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    if not isinstance(a, torch.Tensor) or a.shape != b.shape:
        return math.inf
    if not a.numel():
        return 0.0
    err = float((a.double() - b.double()).abs().max())
    return math.inf if math.isnan(err) else err  # NaN never compares as "too large"


def fmt_gib(x: float) -> str:
    return f"{x / 2**30:.3f} GiB"


__all__ = [
    "HARNESS",
    "SINGLE",
    "WORLD",
    "Failure",
    "a2a_elements",
    "choice",
    "max_err",
    "msg",
    "ranks",
    "rng",
    "run_seed",
    "sent_elements",
]
