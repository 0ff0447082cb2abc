"""Trusted code the agent-deploy checkers run in a child process (labkit.check.run_function).

It builds the models from the shipped weights with the reference skills of adref.py, imports
the attendee's modules from the lab folder (the cwd), runs them and returns plain data for the
checker to judge. The attendee's code runs in this same child process, which is why the
checker itself never imports it, and why the checker recomputes every figure it is given.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import adref as ar  # noqa: E402
import torch  # noqa: E402


def _skill(name: str) -> Any:
    path = Path.cwd() / "skills" / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"skills/{name}.py does not exist")
    spec = importlib.util.spec_from_file_location(f"skills.{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _plain(d: Any) -> Any:
    if isinstance(d, dict):
        return {str(k): _plain(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_plain(v) for v in d]
    if isinstance(d, (bool, int, float, str)) or d is None:
        return d
    return repr(d)


def h_profile(case: str, ps: list[list[int]], n: int) -> dict:
    from agent.measure import profile

    model = ar.chain(
        *(
            {
                "baseline": (),
                "fused": ("fused_ops",),
                "graph": ("fused_ops", "graph_mode"),
                "mtp": ("fused_ops", "graph_mode", "quant_mx", "mtp"),
            }[case]
        )
    )
    return _plain(profile(model, ps, n))


def h_profile_each(cases: list[str], ps: list[list[int]], n: int) -> list[dict]:
    """``h_profile(case)`` for each case in one child (one interpreter and torch import)."""
    return [h_profile(case, ps, n) for case in cases]


def h_fused(ps: list[list[int]], n: int, seqs: list[list[int]]) -> dict:
    from agent.verify import verify

    sk = _skill("fused_ops")
    ref = ar.fresh()
    cand = ref.clone()
    sk.apply(cand)
    out = {"skill": _plain(sk.SKILL), "changed": cand.ops.changed()}
    out["logits"] = [cand.teacher_logits(s) for s in seqs]
    out["measure"], out["tokens"] = ar.measure_and_tokens(cand.clone(), ps, n)
    spec = sk.SKILL.get("verify", {})
    out["verify_good"] = _plain(verify(ref, cand, spec, ps, n))
    out["verify_broken"] = _plain(
        verify(ref, ar.swiglu_swapped(ar.fused(ref.clone())), {"kind": "tokens"}, ps, n)
    )
    # a model that stops one token early: the missing token counts as changed, whichever side is short
    short = ref.clone()
    short.decode_fn = _one_short  # type: ignore[method-assign]
    out["verify_short"] = []
    for a, b in ((ref, short), (short, ref)):
        try:
            out["verify_short"].append(_plain(verify(a, b, {"kind": "tokens"}, ps[:1], n)))
        except Exception as e:  # noqa: BLE001 - reported by the check
            out["verify_short"].append(f"{type(e).__name__}: {e}")
    return out


def _one_short(model: Any, prompt_ids: list[int], n: int) -> list[int]:
    """A decode loop that gives one token fewer than asked (for verify's length rule)."""
    from labkit.deploy.model import greedy

    return greedy(model, prompt_ids, n)[:-1]


def h_quant(ps: list[list[int]], n: int, seqs: list[list[int]]) -> dict:
    from agent.verify import verify

    sk = _skill("quant_mx")
    ref = ar.chain("fused_ops", "graph_mode")
    cand = ref.clone()
    sk.apply(cand)
    out = {"skill": _plain(sk.SKILL), "state": _plain(cand.state())}
    out["logits"] = [cand.teacher_logits(s) for s in seqs]
    out["measure"] = ar.measure(cand.clone(), ps, n)
    spec = sk.SKILL.get("verify", {})
    out["verify_good"] = _plain(verify(ref, cand, spec, ps, n))
    out["verify_broken"] = _plain(verify(ref, ar.quant_all_fp4(ref.clone()), spec, ps, n))
    # "at most tol": a candidate equal to the reference passes a zero tolerance
    out["verify_at_tol"] = _plain(verify(ref, ref.clone(), {"kind": "logits", "tol": 0.0}, ps[:1], n))
    return out


def h_graph(ps: list[list[int]], n: int) -> dict:
    from agent.measure import measure

    sk = _skill("graph_mode")
    ref = ar.chain("fused_ops")
    cand = ref.clone()
    sk.apply(cand)
    out = {"skill": _plain(sk.SKILL), "state": _plain(cand.state())}
    out["experts"] = getattr(cand.ops.experts, "__name__", "")
    out["mine_before"] = _plain(measure(ref.clone(), ps, n))
    out["mine_after"] = _plain(measure(cand.clone(), ps, n))
    out["measure"], out["tokens"] = ar.measure_and_tokens(cand.clone(), ps, n)
    return out


def h_mtp(ps: list[list[int]], n: int) -> dict:
    from agent.mtp import generate_mtp

    sk = _skill("mtp")
    base = ar.chain("fused_ops", "graph_mode", "quant_mx")
    cand = base.clone()
    sk.apply(cand)
    out: dict[str, Any] = {
        "skill": _plain(sk.SKILL),
        "state": _plain(cand.state()),
        "tokens": [],
        "stats": [],
    }
    out["ref_stats"] = []
    out["misplaced"] = []  # the first step whose successor starts at the wrong position
    calls: list[list[Any]] = []  # [cache.length, ids, main model's argmax at ids[0] (None if it raised)]
    real_step = cand.step

    def step(ids: list[int], cache: Any) -> Any:
        calls.append([cache.length, list(ids), None])
        logits, hidden = real_step(ids, cache)
        calls[-1][2] = int(logits[0].argmax())
        return logits, hidden

    cand.step = step  # type: ignore[method-assign]
    drafted: list[tuple[int, int, Any, int]] = []  # model.draft calls: (position, next_id, hidden, draft)
    real_draft = cand.draft

    def draft(hidden: Any, next_id: int, cache: Any, position: int) -> int:
        d = real_draft(hidden, next_id, cache, position)
        drafted.append((int(position), int(next_id), hidden.detach().clone(), int(d)))
        return d

    cand.draft = draft  # type: ignore[method-assign]
    out["wrong_draft"] = None  # the first model.draft call that differs from the checker's loop
    for i, p in enumerate(ps):
        calls.clear()
        drafted.clear()
        try:
            toks: list[int] | None = cand.generate(p, n)
        except ValueError:  # e.g. the KV cache overflows when positions are never given back
            toks = None
        seq = list(p) + (toks or [])
        for k in range(len(calls) - 1):
            start, ids, a0 = calls[k]
            if len(ids) != 2:
                continue
            want_next = start + (1 if a0 != ids[1] else 2)
            if calls[k + 1][0] != want_next:
                kept = toks is not None and len(seq) > start + 1 and seq[start + 1] == ids[1]
                out["misplaced"].append([i, k, start, ids[1], a0, calls[k + 1][0], want_next, kept])
                break
        if out["misplaced"]:
            return out
        if toks is None:
            toks = cand.generate(p, n)  # raise the attendee's error as it is
        out["tokens"].append(toks)
        out["stats"].append(_plain(getattr(cand, "spec_stats", None)))
        theirs = list(drafted)
        drafted.clear()
        ar.generate_mtp(cand, p, n)  # the reference loop on the attendee's model and draft path
        out["ref_stats"].append(_plain(cand.spec_stats))
        if out["wrong_draft"] is None and theirs:
            for k, (got, want) in enumerate(zip(theirs, drafted, strict=False)):
                field = (
                    "position"
                    if got[0] != want[0]
                    else "next_id"
                    if got[1] != want[1]
                    else "hidden"
                    if not torch.equal(got[2], want[2])
                    else None
                )
                if field is not None:
                    out["wrong_draft"] = [i, k, field, got[0], want[0], got[1], want[1]]
                    break
    cand.step = real_step  # type: ignore[method-assign]
    cand.draft = real_draft  # type: ignore[method-assign]
    out["measure"] = ar.measure(cand.clone(), ps, n)
    eager = ar.fresh()
    out["eager_tokens"] = [generate_mtp(eager, p, n) for p in ps]
    return out


def _ns(name: str, fn: Any, verify: dict, en: str, zh: str) -> Any:
    return SimpleNamespace(SKILL={"name": name, "what": {"en": en, "zh": zh}, "verify": verify}, apply=fn)


def h_rollback(ps: list[list[int]], n: int) -> dict:
    from agent.runner import try_skill

    out = {}
    cases = {
        # on the graph-mode model, not the quantised one: its accuracy breaks all the same
        # (step 3's broken skill) and the try costs a quarter of the CPU time
        "broken": (
            ("fused_ops", "graph_mode"),
            _ns(
                "checker_fp4_all",
                ar.quant_all_fp4,
                {"kind": "logits", "tol": 0.12},
                "W4A4 everywhere",
                "全部 W4A4",
            ),
        ),
        "slow": (
            ("fused_ops",),
            _ns(
                "checker_eager_gating",
                ar.unfused_norm,
                {"kind": "tokens"},
                "eager gating back",
                "换回 eager 门控",
            ),
        ),
        "good": (("fused_ops",), _ns("checker_graph", ar.graph, {"kind": "tokens"}, "graph mode", "图模式")),
    }
    for key, (chain, skill) in cases.items():
        model = ar.chain(*chain)
        before = _plain(model.state())
        ids = {k: id(v) for k, v in model.weights.items()}
        got, decision = try_skill(model, skill, ps, n)
        out[key] = {
            "decision": _plain(decision),
            "same_object": got is model,
            "returned_state": _plain(got.state()),
            "model_state_before": before,
            "model_state_after": _plain(model.state()),
            "weights_replaced": sorted(k for k, v in model.weights.items() if ids.get(k) != id(v))[:5],
        }
    return out


def h_workflow(ps: list[list[int]], n: int) -> dict:
    from agent.log import write_log
    from agent.runner import load_skills, run_workflow

    skills = load_skills("skills")
    final, history = run_workflow(ar.fresh(), skills, ps, n, None)
    with tempfile.TemporaryDirectory() as tmp:
        write_log(history, tmp)
        files = {p.name: p.read_text(encoding="utf-8") for p in Path(tmp).iterdir() if p.is_file()}
    return {
        "history": _plain(history),
        "files": files,
        "final": _plain(final.state()),
        "skills": sorted(skills),
    }
