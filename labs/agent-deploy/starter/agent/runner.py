"""The workflow runner: profile, propose the next skill, apply it to a copy, verify, measure,
keep it or roll it back, and record every decision with its evidence."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from labkit.deploy import propose_with_fallback  # noqa: F401 (for run_workflow)

from .measure import PROFILE, measure, profile  # noqa: F401
from .verify import verify  # noqa: F401

#: a skill is kept only when it verifies and makes decode at least this much faster
MIN_GAIN = 1.005


def load_skills(folder="skills"):
    """``{name: module}`` of every ``skills/*.py`` with a ``SKILL`` dict and an ``apply(model)``."""
    skills = {}
    for path in sorted(Path(folder).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"skills.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        if hasattr(module, "SKILL") and hasattr(module, "apply"):
            skills[module.SKILL["name"]] = module
    return skills


def summary(m):
    return {k: m[k] for k in ("ms_per_token", "launches_per_token", "weight_bytes")}


def try_skill(model, skill, prompts, n, profile_name=PROFILE, before=None):
    """Try one skill. Returns ``(model to continue with, decision)``: the changed model when the
    skill verifies and is at least ``MIN_GAIN`` faster, else ``model`` exactly as it was (the
    rollback). ``before`` is ``measure(model, ...)`` when the caller already has it.

    ``decision``: ``{"skill", "what", "verify" (verify()'s result), "before", "after"
    (``summary()`` of the measurements; ``after`` is None when verification failed), "speedup"
    (before / after ms per token, or None), "decision" ("accept" | "reject"), "why"}`` with
    ``why = {"code": "verification" | "no_gain" | "accepted", "metric", "value", "tol"}``: the
    figure the decision rests on and the limit it was held to."""
    # TODO (step 6)
    raise NotImplementedError("TODO (step 6): try_skill() in agent/runner.py")


def run_workflow(model, skills, prompts, n, proposer=None, profile_name=PROFILE):
    """Until every skill has been tried: profile, ask the proposer (rules when ``None``), try the
    proposed skill. Returns ``(final model, decisions)``; each decision also carries who
    proposed it and why (``proposed_by``: the proposal's ``source``; ``proposal``: its ``reasons``,
    in English and Chinese; use ``propose_with_fallback``), the profile it was proposed from (``profile``: launch_ms, compute_ms, memory_ms, bound) and
    ``cumulative``: the baseline's ms per token over the current model's after this decision."""
    # TODO (step 7)
    raise NotImplementedError("TODO (step 7): run_workflow() in agent/runner.py")
