"""Trusted reference of the agent-deploy checkers: the skills done right (and done wrong on
purpose), the measurement, the profile and the accuracy metric, and the inputs a check judges on.

Imported by the checkers (in their own process) and by ad_harness.py (in the child process where
the attendee's code runs). Nothing here imports the attendee's code.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from typing import Any

import torch
from labkit import emu, mx
from labkit.deploy import DeployModel, eager_gating, grouped_experts
from labkit.models import corpus, load_tiny_moe
from labkit.npu import npu_add_rms_norm, npu_moe_gating_top_k_softmax, npu_rms_norm, npu_swiglu

PROFILE = "950PR"
N_TOKENS = 10  # new tokens per prompt in a check (the first comes from prefill)
MIN_GAIN = 1.005
LAUNCH_EQ = 1e-6  # relative tolerance of figures recomputed with the same cost model

_BASE: list[Any] = []


def base_and_tok() -> tuple[Any, Any]:
    if not _BASE:
        torch.set_num_threads(1)
        _BASE.extend(load_tiny_moe())
    return _BASE[0], _BASE[1]


def fresh() -> DeployModel:
    return DeployModel(base_and_tok()[0])


# -- inputs the attendee has not seen ----------------------------------------------------------
def run_seed(step: str) -> int:
    rid = os.environ.get("LAB_RUN_ID", "local")
    return int.from_bytes(hashlib.sha256(f"{rid}/{step}".encode()).digest()[:4], "little")


def _margins_ok(names: tuple[str, ...], p: list[int], n: int, min_margin: float = 2e-3) -> bool:
    """True when greedy decoding of ``p`` on the reference model ``names`` has no near tie (top-2
    logits within ``min_margin``) for ``n`` tokens: a prompt where fused and eager ops could round
    to different tokens is not used to judge anyone."""
    seq = list(p) + ref_tokens(names, p, n)
    logits = ref_teacher(names, seq)[len(p) - 1 : len(p) - 1 + n]
    top2 = logits.topk(2, dim=-1).values
    return bool((top2[:, 0] - top2[:, 1]).min() >= min_margin)


#: the reference models whose greedy tokens a step compares with another model's: the eager one
#: for every step that compares tokens (fused ops, graph mode, rollback), the quantised one where
#: MTP's tokens are compared with it (its two-token steps round differently from one-token steps)
EAGER: tuple[str, ...] = ()
QUANT = ("fused_ops", "graph_mode", "quant_mx")


def prompts(step: str, k: int = 2, margins: tuple[tuple[str, ...], ...] = (EAGER,)) -> list[list[int]]:
    """``k`` prompts from the run id (corpus sentences of random topics and lengths, 6-40
    words) with no near tie on the reference models ``margins``, plus the fixed shortest case:
    ``<bos>`` and one word."""
    _, tok = base_and_tok()
    rng = random.Random(run_seed(step))
    out: list[list[int]] = []
    while len(out) < k:
        topic = rng.choice(corpus.topics())
        words = " ".join(corpus.make_sentence(topic, rng) for _ in range(8)).split()
        p = tok.encode(" ".join(words[: rng.randint(6, 40)]), bos=True)
        if all(_margins_ok(m, p, N_TOKENS) for m in margins):
            out.append(p)
    short = tok.encode("the", bos=True)
    out.append(short)
    return out


# -- reference skills ------------------------------------------------------------------------------
def _rms(x, g, eps):
    return npu_rms_norm(x, g, epsilon=eps)[0]


def _add_rms(x, r, g, eps):
    y, _, s = npu_add_rms_norm(x, r, g, epsilon=eps)
    return y, s


def _swiglu(gu):
    return npu_swiglu(gu, dim=-1)


def _gating(logits, k):
    w, idx, _ = npu_moe_gating_top_k_softmax(logits, None, k=k)
    return w / w.sum(-1, keepdim=True), idx.long()


def fused(m: DeployModel) -> DeployModel:
    m.ops.rms_norm, m.ops.add_rms_norm, m.ops.swiglu, m.ops.gating = _rms, _add_rms, _swiglu, _gating
    return m


def graph(m: DeployModel) -> DeployModel:
    m.graph = True
    m.ops.experts = grouped_experts
    return m


def _quantize(m: DeployModel, plan: list[tuple[str, str]]) -> None:
    """``m.weights[name] = mx.quantize_mx(weight, fmt)`` for each ``(name, fmt)``, an MX weight
    first dequantised; one quantize_mx per stack of alike weights (a layer's experts): its blocks
    run along each row, so each slice is that weight's own quantisation (CPU time only)."""
    groups: dict[tuple[Any, ...], list[tuple[str, torch.Tensor]]] = {}
    for name, fmt in plan:
        w = m.weights[name]
        w = w.dequantize() if isinstance(w, mx.MXTensor) else w
        groups.setdefault((fmt, tuple(w.shape), w.dtype), []).append((name, w))
    for (fmt, shape, dtype), ws in groups.items():
        q = mx.quantize_mx(torch.stack([w for _, w in ws]), fmt)
        for i, (name, _) in enumerate(ws):
            m.weights[name] = mx.MXTensor(q.codes[i], q.scales[i], q.fmt, shape, q.axis - 1, dtype)


def quant(m: DeployModel) -> DeployModel:
    fp8 = [(n, "mxfp8_e4m3") for n in m.names("attn") + m.names("shared")]
    _quantize(m, fp8 + [(n, "mxfp4") for n in m.names("expert")])
    for g in ("attn", "expert", "shared"):
        m.act_fmt[g] = "mxfp8_e4m3"
    return m


def quant_all_fp4(m: DeployModel) -> DeployModel:
    """The accuracy-breaking skill: W4A4 everywhere, LM head and router included."""
    groups = ("attn", "router", "shared", "expert", "lm_head")
    _quantize(m, [(n, "mxfp4") for g in groups for n in m.names(g)])
    for g in groups:
        m.act_fmt[g] = "mxfp4"
    return m


def swiglu_swapped(m: DeployModel) -> DeployModel:
    """A broken fused SwiGLU (gate and up halves swapped): changes the tokens."""
    m.ops.swiglu = lambda gu: npu_swiglu(torch.cat(gu.chunk(2, -1)[::-1], -1), dim=-1)
    return m


def unfused_norm(m: DeployModel) -> DeployModel:
    """Verifies (the same maths) but is slower: puts the eager gating back."""
    m.ops.gating = eager_gating
    return m


def generate_mtp(model: DeployModel, prompt_ids: list[int], n: int) -> list[int]:
    logits, hidden, cache = model.prefill(prompt_ids, max_new=n)
    pos = len(prompt_ids) - 1
    pending = int(logits[-1].argmax())
    out, h = [pending], hidden[-1]
    drafts = accepted = 0
    while len(out) < n:
        draft = model.draft(h, pending, cache, pos)
        drafts += 1
        start = cache.length
        logits, hidden = model.step([pending, draft], cache)
        first = int(logits[0].argmax())
        if first == draft:
            accepted += 1
            pending = int(logits[1].argmax())
            out += [draft, pending]
            h, pos = hidden[1], start + 1
        else:
            cache.length = start + 1
            pending = first
            out.append(pending)
            h, pos = hidden[0], start
    model.spec_stats = {"drafts": drafts, "accepted": accepted}  # type: ignore[attr-defined]
    return out[:n]


def mtp(m: DeployModel) -> DeployModel:
    plan = [
        (n, "mxfp4" if ".expert." in n else "mxfp8_e4m3")
        for n in m.names("mtp")
        if getattr(m.weights[n], "ndim", 0) == 2
    ]
    _quantize(m, plan)
    m.weights["mtp.lm_head"] = mx.quantize_mx(m.weights["lm_head"], "mxfp8_e4m3")
    m.act_fmt["mtp"] = "mxfp8_e4m3"
    m.decode_fn = generate_mtp
    return m


SKILLS = {
    "fused_ops": fused,
    "graph_mode": graph,
    "quant_mx": quant,
    "quant_mxfp4_all": quant_all_fp4,
    "mtp": mtp,
}


#: the reference skills plus the checker's own "slower" skill (step 6), by name for :func:`chain`
CHAIN_SKILLS = {**SKILLS, "eager_gating": unfused_norm}


def chain(*names: str) -> DeployModel:
    m = fresh()
    for n in names:
        m = CHAIN_SKILLS[n](m.clone())
        m.applied.append(n)
    return m


# -- measurement -----------------------------------------------------------------------------------
def _charged(model: DeployModel, p: list[int], n: int) -> tuple[float, int, float, float]:
    """One generation of ``p`` inside an emulation session: (elapsed ms, launches, flops, bytes)."""
    with emu.session(PROFILE, measurer=False) as s:
        model.generate(p, n)
    rep = s.report()
    return (
        rep.elapsed_ms,
        rep.launches,
        sum(o.flops for o in rep.ops.values()),
        sum(o.bytes for o in rep.ops.values()),
    )


def _figures(
    runs: list[tuple[float, int, float, float]], n: int, graph: bool, weight_bytes: int
) -> dict[str, Any]:
    total, launches, tokens = 0.0, 0, 0
    flops = nbytes = 0.0
    for ms, la, fl, nb in runs:
        total += ms
        launches += la
        tokens += n - 1
        flops += fl
        nbytes += nb
    prof = emu.get_profile(PROFILE)
    scale = emu.DEFAULT_SCALE
    lpt = launches / tokens
    launch_s = (prof.graph_launch_overhead if graph else prof.launch_overhead).value
    out = {
        "ms_per_token": total / tokens,
        "launches_per_token": lpt,
        "weight_bytes": weight_bytes,
        "launch_ms": lpt * launch_s * 1e3,
        "compute_ms": flops / tokens / (prof.peak("fp16") * scale) * 1e3,
        "memory_ms": nbytes / tokens / (prof.hbm_bandwidth.value * scale) * 1e3,
    }
    parts = {k: out[f"{k}_ms"] for k in ("launch", "compute", "memory")}
    out["bound"] = max(parts, key=lambda k: parts[k])
    return out


def measure(model: DeployModel, ps: list[list[int]], n: int = N_TOKENS) -> dict[str, Any]:
    """Steady-state figures of ``model``: each prompt once to warm up, once charged."""
    return measure_and_tokens(model, ps, n)[0]


def measure_and_tokens(
    model: DeployModel, ps: list[list[int]], n: int = N_TOKENS
) -> tuple[dict[str, Any], list[list[int]]]:
    """:func:`measure`, and the greedy tokens of each prompt (its warm-up run's)."""
    runs, toks = [], []
    for p in ps:
        toks.append(model.generate(p, n))
        runs.append(_charged(model, p, n))
    return _figures(runs, n, model.graph, model.weight_bytes()), toks


def rel_rms(ref: DeployModel, cand: DeployModel, ps: list[list[int]], n: int = N_TOKENS) -> float:
    num = den = 0.0
    for p in ps:
        seq = list(p) + ref.generate(p, n)
        a, b = ref.teacher_logits(seq), cand.teacher_logits(seq)
        num += float((b - a).pow(2).sum())
        den += float(a.pow(2).sum())
    return math.sqrt(num / den)


def tokens(model: DeployModel, ps: list[list[int]], n: int = N_TOKENS) -> list[list[int]]:
    return [model.generate(p, n) for p in ps]


# -- the checker's reference runs, each computed once per check ---------------------------------------
# A check asks for the same reference run several times (the prompt draw's margins, the tokens a
# skill must keep, the steady-state figures); each is computed once, in this process's memory:
# the checker is a new process on every press, so nothing outlives the check or comes from a file.
# A reference generation runs inside an emulation session, so one run gives both its tokens and,
# once the model is warm (no graph compiled in the run), its steady-state figures: the charges of
# a generation on a warm model do not depend on the runs before it, so this is what a warm-up run
# then a charged run give, for one run instead of two.
_REF_MODELS: dict[tuple[str, ...], DeployModel] = {}
_REF_TOKENS: dict[tuple[Any, ...], list[int]] = {}
_REF_TEACHER: dict[tuple[Any, ...], torch.Tensor] = {}
_REF_CHARGED: dict[tuple[Any, ...], tuple[float, int, float, float]] = {}
_WARM: set[tuple[str, ...]] = set()


def ref(names: tuple[str, ...]) -> DeployModel:
    """The checker's model after the reference skills ``names`` (one instance per check: clone it
    before changing anything)."""
    if names not in _REF_MODELS:
        if names:  # the skills applied to (a clone of) the model of the skills before the last
            m = CHAIN_SKILLS[names[-1]](ref(names[:-1]).clone())  # (its weights are not re-quantised)
            m.applied.append(names[-1])
        else:
            m = fresh()
        _REF_MODELS[names] = m
    return _REF_MODELS[names]


def _ref_run(names: tuple[str, ...], p: list[int], n: int) -> None:
    """One generation of ``p`` on ``ref(names)`` in a session: its tokens, and its charges when
    the run compiled no graph (a cold run's charges include the one-time compile: not kept)."""
    key = (names, tuple(p), n)
    m = ref(names)
    if m.graph and names not in _WARM:  # compile its step shapes (a 3-token run): its runs are warm
        m.generate(base_and_tok()[1].encode("the", bos=True), 3)
        _WARM.add(names)
    with emu.session(PROFILE, measurer=False) as s:
        toks = m.generate(p, n)
    rep = s.report()
    _REF_TOKENS.setdefault(key, toks)
    if "graph_compile" not in rep.ops:
        _REF_CHARGED[key] = (
            rep.elapsed_ms,
            rep.launches,
            sum(o.flops for o in rep.ops.values()),
            sum(o.bytes for o in rep.ops.values()),
        )


def ref_tokens(names: tuple[str, ...], p: list[int], n: int = N_TOKENS) -> list[int]:
    key = (names, tuple(p), n)
    if key not in _REF_TOKENS:
        _ref_run(names, p, n)
    return list(_REF_TOKENS[key])


def ref_tokens_all(names: tuple[str, ...], ps: list[list[int]], n: int = N_TOKENS) -> list[list[int]]:
    return [ref_tokens(names, p, n) for p in ps]


def ref_teacher(names: tuple[str, ...], seq: list[int]) -> torch.Tensor:
    key = (names, tuple(seq))
    if key not in _REF_TEACHER:
        _REF_TEACHER[key] = ref(names).teacher_logits(seq)
    return _REF_TEACHER[key]


def ref_measure(names: tuple[str, ...], ps: list[list[int]], n: int = N_TOKENS) -> dict[str, Any]:
    """:func:`measure` of ``ref(names)``: the steady-state charges of each prompt's generation on
    the warm model (a run that compiled a graph is run again; see above)."""
    runs = []
    for p in ps:
        key = (names, tuple(p), n)
        for _ in range(2):  # a second run is warm
            if key not in _REF_CHARGED:
                _ref_run(names, p, n)
        runs.append(_REF_CHARGED[key])
    m = ref(names)
    return _figures(runs, n, m.graph, m.weight_bytes())


def ref_rel_rms(
    names: tuple[str, ...], cand: tuple[str, ...], ps: list[list[int]], n: int = N_TOKENS
) -> float:
    """:func:`rel_rms` of the reference model ``cand`` against ``names``."""
    num = den = 0.0
    for p in ps:
        seq = list(p) + ref_tokens(names, p, n)
        a, b = ref_teacher(names, seq), ref_teacher(cand, seq)
        num += float((b - a).pow(2).sum())
        den += float(a.pow(2).sum())
    return math.sqrt(num / den)


def close(a: float, b: float, rel: float = 1e-4) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


# -- checker side ------------------------------------------------------------------------------------
HARNESS = __file__.replace("adref.py", "ad_harness.py")


def run_harness(func: str, attendee_file: str, *args: object, timeout: float = 120) -> Any:
    """Run ``ad_harness.<func>`` in a child process (where the attendee's modules are imported);
    an error in their code fails the step, shown with their own traceback lines."""
    from labkit.check import Failure, describe_error, run_function

    r = run_function(HARNESS, func, *args, timeout=timeout, memory_mb=3072)
    if r.error is not None:
        raise Failure(describe_error(attendee_file, r.error, r.stderr))
    return r.value


def fmt_ms(x: float) -> str:
    return f"{x:.4f} ms"
