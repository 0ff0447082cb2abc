"""A lab's recorded check costs: ``checks/costs.yaml``, step id -> CPU seconds its check cost on
the reference solution (the largest ``cpu_s`` the checker reported in ``labserver selftest LAB
--record-costs``). Committed with the lab and written only by that command; hand edits are
allowed, and :func:`load_costs` says what is wrong with them (file and field).

What reads them: the wall budget of a check (:func:`labserver.checks.timeouts.wall_budget`), whose
fault a timeout is (:func:`labserver.checks.timeouts.blame`) and ``labserver lint`` (a
``timeout_s`` under 5x the cost is a warning). A step with no entry has no recorded cost: it gets its
``timeout_s`` and nothing else changes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

COSTS_FILE = "checks/costs.yaml"
#: ``labserver lint`` warns when a step's ``timeout_s`` is under this many times its recorded cost
LINT_FACTOR = 5.0
HEADER = (
    "# CPU seconds each step's check cost on the reference solution (checker and the attendee-code\n"
    "# processes it ran), written by `labserver selftest <lab> --record-costs`: the wall budget of a\n"
    '# check and the lint of timeout_s come from these (docs/writing-labs.md, "Check costs").\n'
)


def load_costs(lab_path: Path, step_ids: Sequence[str]) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """The costs of ``lab_path`` (empty when it has no file) and the problems of the file as
    ``(field, message)``: not a mapping, an unknown step, a cost that is not a number > 0."""
    path = lab_path / COSTS_FILE
    if not path.is_file():
        return {}, []
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        return {}, [("", f"not valid YAML: {getattr(exc, 'problem', exc)}")]
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [("", "must be a mapping of step id -> CPU seconds")]
    costs: dict[str, float] = {}
    problems: list[tuple[str, str]] = []
    for key, value in raw.items():
        step = str(key)
        if step not in step_ids:
            problems.append((step, f"no step {step!r} in lab.yaml"))
        elif isinstance(value, bool) or not isinstance(value, int | float):
            problems.append((step, f"{value!r} is not a number of CPU seconds"))
        elif not math.isfinite(value) or value <= 0:
            problems.append((step, f"{value!r}: a cost is a number of CPU seconds above 0"))
        else:
            costs[step] = float(value)
    return costs, problems


def write_costs(lab_path: Path, costs: Mapping[str, float], step_ids: Sequence[str]) -> Path:
    """Write ``costs`` (in the order of ``step_ids``, 2 decimals, at least 0.01) to the lab's
    costs file and return its path. Steps of ``step_ids`` missing from ``costs`` keep the value
    the file had, so recording part of a lab forgets nothing."""
    unknown = sorted(set(costs) - set(step_ids))
    if unknown:
        raise ValueError(f"no such step in the lab: {', '.join(unknown)}")
    old, _ = load_costs(lab_path, step_ids)
    merged = {**old, **costs}
    lines = [f"{step}: {max(0.01, round(merged[step], 2))}\n" for step in step_ids if step in merged]
    path = lab_path / COSTS_FILE
    path.write_text(HEADER + "".join(lines), encoding="utf-8")
    return path
