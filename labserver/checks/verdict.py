"""Running a step's checker and recording its result (DESIGN: the checker protocol).

The verdict comes only from the result channel, never from stdout. Mapping:

====================================  ==========
what happened                         status
====================================  ==========
exit 0 and ``{"passed": true}``        passed
exit 1 and ``{"passed": false}``       failed
timeout, the attendee's (``blame``)   timeout
timeout, the machine's (``blame``)    not_gradable
anything else (no verdict, two        error
verdicts, bad JSON, exit 2, a signal,
exit code disagreeing with verdict)
====================================  ==========

The verdict's optional ``cpu_s`` (what the check cost, CPU seconds, reported by the checker:
``labkit.check.verdict.cpu_seconds``) is a figure, never a judgement:

====================================  ==========================================
``cpu_s`` in the verdict              ``Verdict.cpu_s``
====================================  ==========================================
a finite number >= 0                  that number
absent, negative, not finite, a       None (ignored: the status is unchanged)
bool or not a number
====================================  ==========================================

A timeout is the platform's, not the attendee's, when its processes waited for a CPU rather than
ran (:func:`labserver.checks.timeouts.blame`, from what the backend measured): then the status is
``not_gradable`` and the caller words the message (:mod:`labserver.services.grading.not_gradable`).

A check result is committed to the database before it is returned or published."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from labserver.backends.base import CheckRaw, CheckUsage
from labserver.checks.timeouts import blame
from labserver.models import CheckStatus


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    message: str
    hints: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    #: ``[{"title": str, "columns": [str], "rows": [[str]]}]``: plain-text cells (the page shows
    #: them as text, never as HTML or Markdown: a table may quote the attendee's own files)
    tables: list[dict[str, Any]] = field(default_factory=list)
    #: CPU seconds the checker says the check cost (a figure: never trusted for pass or fail)
    cpu_s: float | None = None


#: caps on the tables of one verdict (labkit.check.table applies the same ones)
MAX_TABLES, MAX_COLUMNS, MAX_ROWS, MAX_CELL_CHARS = 4, 12, 100, 300


def _clean_tables(tables: Any) -> tuple[list[dict[str, Any]] | None, str]:
    """The verdict's ``tables`` as plain strings within the caps; None and why when malformed."""
    if not isinstance(tables, list):
        return None, "The verdict's tables are not a list."
    out: list[dict[str, Any]] = []
    for t in tables[:MAX_TABLES]:
        if not isinstance(t, dict) or not isinstance(t.get("title", ""), str):
            return None, "A table of the verdict is not an object with a title."
        columns, rows = t.get("columns"), t.get("rows")
        if (
            not isinstance(columns, list)
            or not isinstance(rows, list)
            or not all(isinstance(r, list) for r in rows)
        ):
            return None, "A table of the verdict has no list of columns and list of rows."
        cells = [c for row in [columns, *rows] for c in row]
        if not all(isinstance(c, str | int | float) and not isinstance(c, bool) for c in cells):
            return None, "A table cell of the verdict is not text or a number."
        width = min(len(columns), MAX_COLUMNS)
        out.append(
            {
                "title": t.get("title", "")[:MAX_CELL_CHARS],
                "columns": [str(c)[:MAX_CELL_CHARS] for c in columns[:width]],
                "rows": [
                    [str(c)[:MAX_CELL_CHARS] for c in row[:width]] + [""] * (width - len(row))
                    for row in rows[:MAX_ROWS]
                ],
            }
        )
    return out, ""


def _clean_cpu_s(value: Any) -> float | None:
    """The verdict's ``cpu_s`` when it is a finite number >= 0, else None (the table above)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _parse_result(data: bytes) -> tuple[dict[str, Any] | None, str]:
    text = data.decode("utf-8", "replace").strip()
    if not text:
        return None, "The checker ended without giving a verdict."
    decoder = json.JSONDecoder()
    try:
        obj, end = decoder.raw_decode(text)
    except json.JSONDecodeError:
        return None, "The checker's verdict is not valid JSON."
    if text[end:].strip():
        return None, "The checker's result channel received more than one verdict."
    if not isinstance(obj, dict):
        return None, "The checker's verdict is not a JSON object."
    return obj, ""


def _clean_verdict(
    obj: dict[str, Any],
) -> tuple[bool | None, str, list[str], dict[str, float], list[dict[str, Any]], str]:
    passed = obj.get("passed")
    if not isinstance(passed, bool):
        return None, "", [], {}, [], "The verdict has no boolean 'passed' field."
    message = obj.get("message", "")
    hints = obj.get("hints", [])
    metrics = obj.get("metrics", {})
    if not isinstance(message, str) or not isinstance(hints, list) or not isinstance(metrics, dict):
        return None, "", [], {}, [], "The verdict's message/hints/metrics have the wrong type."
    clean_metrics: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None, "", [], {}, [], f"Metric {key!r} is not a finite number."
        clean_metrics[str(key)] = float(value)
    tables, problem = _clean_tables(obj.get("tables", []))
    if tables is None:
        return None, "", [], {}, [], problem
    return passed, message[:10_000], [str(h)[:2000] for h in hints][:20], clean_metrics, tables, ""


#: the ``BackendError``-style reason label of a timeout the machine caused (services/grading/not_gradable.py)
LOAD = "load"


def interpret(
    raw: CheckRaw, timeout_s: float, *, usage: CheckUsage | None = None, cost_s: float | None = None
) -> Verdict:
    """The verdict of a check that ran with a ``timeout_s`` limit (the tables above). ``usage``:
    what the backend measured of its processes (the last sample, taken before a timeout's kill);
    ``cost_s``: its step's recorded cost. Both only decide whose fault a timeout is (with
    ``raw.cpu_s``, the backend's count of the CPU, when it has one); a timed-out verdict carries
    the measured CPU as ``cpu_s``."""
    if raw.timed_out:
        if usage is not None and raw.cpu_s is not None:  # the backend's own count, children included
            usage = CheckUsage(max(usage.cpu_s, raw.cpu_s), usage.run_delay_s, usage.asleep)
        fault = blame(wall_s=timeout_s, usage=usage, cost_s=cost_s)
        measured = usage.cpu_s if usage is not None else raw.cpu_s
        if fault.platform:
            return Verdict(
                CheckStatus.not_gradable,
                f"Not your fault: the server was too busy to finish this check within {timeout_s:g} s "
                f"(it waited for a processor more than it ran). It does not count as an attempt.",
                cpu_s=measured,
            )
        return Verdict(
            CheckStatus.timeout,
            f"The check did not finish within {timeout_s:g} s. Is your code stuck in a loop, "
            "or waiting for input?",
            cpu_s=measured,
        )
    obj, problem = _parse_result(raw.result)
    code = raw.exit_code
    if obj is None:
        detail = f" (exit status {code})" if code not in (None, 0, 1) else ""
        return Verdict(
            CheckStatus.error,
            f"Checker error: {problem}{detail} This is a fault in the checker, "
            "not in your work: the instructor has been told.",
        )
    passed, message, hints, metrics, tables, problem = _clean_verdict(obj)
    if passed is None:
        return Verdict(CheckStatus.error, f"Checker error: {problem}")
    if (passed and code == 0) or (not passed and code == 1):
        status = CheckStatus.passed if passed else CheckStatus.failed
        return Verdict(status, message, hints, metrics, tables, _clean_cpu_s(obj.get("cpu_s")))
    return Verdict(
        CheckStatus.error,
        f"Checker error: its exit status {code} disagrees with its verdict "
        f"(passed={passed}). The instructor has been told.",
    )
