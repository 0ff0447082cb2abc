"""The workflow runner: profile, propose the next skill, apply it to a copy, verify, measure,
keep it or roll it back, and record every decision with its evidence."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from labkit.deploy import propose_with_fallback

from .measure import PROFILE, measure, profile
from .verify import verify

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
    """Try one skill. Returns ``(model to continue with, decision)``: the changed copy when the
    skill verifies and is faster, else ``model`` itself, untouched (the rollback)."""
    spec = skill.SKILL
    before = before or measure(model, prompts, n, profile_name)
    cand = model.clone()
    skill.apply(cand)
    cand.applied.append(spec["name"])
    check = verify(model, cand, spec["verify"], prompts, n)
    decision = {
        "skill": spec["name"],
        "what": spec["what"],
        "verify": check,
        "before": summary(before),
        "after": None,
        "speedup": None,
    }
    if not check["passed"]:
        decision["decision"] = "reject"
        decision["why"] = {
            "code": "verification",
            "metric": check["metric"],
            "value": check["value"],
            "tol": check["tol"],
        }
        return model, decision
    after = measure(cand, prompts, n, profile_name)
    decision["after"] = summary(after)
    decision["speedup"] = before["ms_per_token"] / after["ms_per_token"]
    if decision["speedup"] < MIN_GAIN:
        decision["decision"] = "reject"
        decision["why"] = {
            "code": "no_gain",
            "metric": "speedup",
            "value": decision["speedup"],
            "tol": MIN_GAIN,
        }
        return model, decision
    decision["decision"] = "accept"
    decision["why"] = {"code": "accepted", "metric": "speedup", "value": decision["speedup"], "tol": MIN_GAIN}
    return cand, decision


def run_workflow(model, skills, prompts, n, proposer=None, profile_name=PROFILE):
    """Until every skill has been tried: profile, ask the proposer (rules when ``None``), try the
    proposed skill. Returns ``(final model, decisions)``; each decision also carries who
    proposed it and why (``proposed_by``: the proposal's ``source``; ``proposal``: its ``reasons``,
    in English and Chinese; use ``propose_with_fallback``), the profile it was proposed from (``profile``: launch_ms, compute_ms, memory_ms, bound) and
    ``cumulative``: the baseline's ms per token over the current model's after this decision."""
    remaining = dict(skills)
    history = []
    baseline = None
    while remaining:
        prof = profile(model, prompts, n, profile_name)
        if baseline is None:
            baseline = prof["ms_per_token"]
        brief = {
            k: prof[k]
            for k in ("ms_per_token", "launch_ms", "compute_ms", "memory_ms", "bound", "weight_bytes")
        }
        candidates = {name: mod.SKILL["what"]["en"] for name, mod in remaining.items()}
        past = [{k: d[k] for k in ("skill", "decision", "speedup")} for d in history]
        proposal = propose_with_fallback(proposer, brief, candidates, past)
        model, decision = try_skill(
            model, remaining.pop(proposal.skill), prompts, n, profile_name, before=prof
        )
        decision["proposed_by"] = proposal.source
        decision["proposal"] = proposal.reasons
        decision["profile"] = {k: brief[k] for k in ("launch_ms", "compute_ms", "memory_ms", "bound")}
        now = decision["after"] if decision["decision"] == "accept" else decision["before"]
        decision["cumulative"] = baseline / now["ms_per_token"]
        history.append(decision)
    return model, history
