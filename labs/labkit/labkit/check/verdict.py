"""The checker's side of the result protocol (DESIGN.md, "The checker protocol").

A checker ends with exactly one verdict: a JSON object ``{"passed", "message", "hints",
"metrics", "cpu_s"}`` (and ``"tables"`` when the checker attached any with :func:`table`) written to
the inherited pipe whose descriptor number is in ``LAB_RESULT_FD``, followed by exit status 0
(passed) or 1 (failed). ``cpu_s`` is what the check cost, in CPU seconds (user + system) of the
checker, the children it waited for and the children a fork server ran for it
(:func:`cpu_seconds`); the server keeps it as a figure (``labserver selftest --record-costs``
records it per step) and never judges by it. Anything else (a crash, no verdict, a
disagreement between verdict and exit code) is a *checker error* for the server.

When ``LAB_RESULT_FD`` is unset (someone runs a checker by hand) the verdict is printed in a
readable form instead and the exit status is the same.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import NoReturn

from . import spending

__all__ = ["Failure", "cpu_seconds", "failed", "main", "msg", "passed", "result", "table"]

MAX_MESSAGE_CHARS = 8000
MAX_HINTS = 20
#: caps of the tables a verdict carries (the server enforces the same ones)
MAX_TABLES, MAX_COLUMNS, MAX_ROWS, MAX_CELL_CHARS = 4, 12, 100, 300

_TABLES: list[dict] = []


def _cell(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def table(title: str, columns: Iterable[object], rows: Iterable[Iterable[object]]) -> None:
    """Attach a table to this check's verdict, pass or fail (the lab page shows it under the
    message; ``labserver check`` prints it). Cells are plain text, shown as written, never as
    HTML or Markdown, so a table may quote the attendee's own files. At most ``MAX_TABLES``
    tables of ``MAX_COLUMNS`` columns and ``MAX_ROWS`` rows; longer cells are cut."""
    cols = [_cell(c) for c in columns][:MAX_COLUMNS]
    body = [[_cell(c) for c in row][: len(cols)] for row in rows]
    if len(body) > MAX_ROWS:
        body = body[: MAX_ROWS - 1] + [[f"… {len(body) - MAX_ROWS + 1} more rows"] + [""] * (len(cols) - 1)]
    body = [row + [""] * (len(cols) - len(row)) for row in body]
    if len(_TABLES) < MAX_TABLES:
        _TABLES.append({"title": _cell(title), "columns": cols, "rows": body})


def msg(en: str, zh: str) -> str:
    """Pick the English or Simplified Chinese text by ``LAB_LANG`` (``zh*`` picks ``zh``)."""
    return zh if os.environ.get("LAB_LANG", "en").lower().startswith("zh") else en


class Failure(Exception):
    """Raised (by a checker or an ``expect_*`` helper) to fail the step with a message for the learner."""

    def __init__(self, message: str, hints: Iterable[str] | str = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hints: list[str] = [hints] if isinstance(hints, str) else [str(h) for h in hints]


def _clean_metrics(metrics: Mapping[str, object] | None) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for key, value in (metrics or {}).items():
        if isinstance(value, bool):
            out[str(key)] = int(value)
            continue
        if hasattr(value, "item") and callable(value.item):  # 0-d tensors, numpy scalars
            value = value.item()
        if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
            out[str(key)] = value
        else:
            print(f"labkit.check: metric {key!r}={value!r} is not a finite number; dropped", file=sys.stderr)
    return out


def cpu_seconds() -> float:
    """The CPU seconds (user + system) this check has cost so far: this process, its children it
    waited for (``RUSAGE_CHILDREN``) and the attendee-code children a fork server ran for it
    (:func:`labkit.check.spending.spawned_cpu_s`), which ``RUSAGE_CHILDREN`` does not see."""

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + spending.spawned_cpu_s()
    return round(total, 3)


def _verdict(
    passed: bool, message: str, hints: Iterable[str] | str, metrics: Mapping[str, object] | None
) -> dict:
    hint_list = [hints] if isinstance(hints, str) else [str(h) for h in hints]
    message = str(message)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 20] + "\n... (truncated)"
    out = {
        "passed": bool(passed),
        "message": message,
        "hints": hint_list[:MAX_HINTS],
        "metrics": _clean_metrics(metrics),
        "cpu_s": cpu_seconds(),
    }
    if _TABLES:
        out["tables"] = list(_TABLES)
    return out


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def result(
    passed: bool,
    message: str,
    hints: Iterable[str] | str = (),
    metrics: Mapping[str, object] | None = None,
) -> NoReturn:
    """Write the one verdict and end the process: exit 0 if ``passed`` else 1.

    With ``LAB_RESULT_FD`` set, the JSON verdict goes to that descriptor (then it is closed);
    if it cannot be written the process exits 2 (checker error). Without it, a readable verdict
    is printed on stdout. The process ends with ``os._exit`` so no later code (atexit hooks,
    threads, ``finally`` blocks) can add output or change the status.
    """
    verdict = _verdict(passed, message, hints, metrics)
    code = 0 if verdict["passed"] else 1
    fd_text = os.environ.get("LAB_RESULT_FD")
    if fd_text:
        data = (json.dumps(verdict, ensure_ascii=False, allow_nan=False) + "\n").encode()
        try:
            fd = int(fd_text)
            while data:
                written = os.write(fd, data)
                data = data[written:]
            os.close(fd)
        except (ValueError, OSError) as exc:
            _flush()
            print(
                f"labkit.check: cannot write the verdict to LAB_RESULT_FD={fd_text}: {exc}", file=sys.stderr
            )
            _flush()
            os._exit(2)
    else:
        _flush()
        print(_readable(verdict))
    _flush()
    os._exit(code)


def _readable(verdict: dict) -> str:
    head = "PASSED" if verdict["passed"] else "FAILED"
    lines = [f"{head}: {verdict['message']}"]
    lines += [f"  hint: {h}" for h in verdict["hints"]]
    lines += [f"  {k} = {v}" for k, v in verdict["metrics"].items()]
    for t in verdict.get("tables", []):
        lines += ["", f"  {t['title']}", "  " + " | ".join(t["columns"])]
        lines += ["  " + " | ".join(row) for row in t["rows"]]
    return "\n".join(lines)


def passed(message: str, metrics: Mapping[str, object] | None = None) -> NoReturn:
    """Pass the step (see :func:`result`)."""
    result(True, message, (), metrics)


def failed(message: str, hints: Iterable[str] | str = ()) -> NoReturn:
    """Fail the step (see :func:`result`)."""
    result(False, message, hints, None)


CheckFn = Callable[[], "str | tuple[str, Mapping[str, object]] | None"]


def main(fn: CheckFn) -> NoReturn:
    """Run a checker function and turn its outcome into the verdict.

    ``fn()`` returning a message, or ``(message, metrics)``, passes; raising :class:`Failure`
    fails with its message and hints; any other exception is a bug in the checker: the traceback
    goes to stderr and the process exits 2 with *no* verdict (the server shows "checker error").
    """
    try:
        out = fn()
    except Failure as failure:
        failed(failure.message, failure.hints)
    except BaseException:  # noqa: BLE001 - a checker bug, including SystemExit from inside fn
        traceback.print_exc()
        _flush()
        os._exit(2)
    metrics: Mapping[str, object] | None = None
    message: str | None
    if isinstance(out, tuple):
        message, metrics = out
    else:
        message = out
    passed(message if message is not None else msg("Check passed.", "检查通过。"), metrics)
