"""Trusted harness the checkers run in a child process (``labkit.check.run_function``).

It loads the models from the lab's pristine weights (a path the checker passes), imports the
attendee's ``dspark`` package from the working directory, calls it, measures emulated time in
its own ``labkit.emu`` session (950DT, graph mode) and returns plain data. The verdict is made
by the checker, never here: nothing this file returns is taken on trust beyond what it measured.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from labkit import emu
from labkit.dspark import load_drafter
from labkit.models import load_tiny_moe

PROFILE = "950DT"


def _models(weights: str) -> tuple[Any, Any]:
    torch.set_num_threads(1)
    target, _tok = load_tiny_moe()
    return target, load_drafter(weights)


def _session() -> emu.EmuSession:
    return emu.session(PROFILE, graph_mode=True, measurer=False)  # emulated on a card too


@torch.no_grad()
def _prefill_ms(target: Any, prompt: list[int]) -> float:
    with _session() as s:
        target(torch.tensor([prompt]), target.new_cache(1, len(prompt)))
        return s.elapsed_ms()


def _ints(xs: Any) -> list[int]:
    if isinstance(xs, torch.Tensor):
        xs = xs.reshape(-1).tolist()
    return [int(x) for x in xs]


def baseline(weights: str, prompts: list[list[int]], n: int, greedy: bool = True) -> list[dict[str, Any]]:
    """Greedy (unless ``greedy`` is False) and MTP1 decoding of each prompt, with emulated TPOT."""
    from dspark.baseline import greedy_decode, mtp1_decode

    target, _ = _models(weights)
    out = []
    for p in prompts:
        pre = _prefill_ms(target, p)
        g, tg = [], pre
        if greedy:
            with _session() as s:
                g = _ints(greedy_decode(target, list(p), n))
                tg = s.elapsed_ms()
        events: list[tuple[Any, ...]] = []
        _watch_mtp(target, events)
        try:
            with _session() as s:
                m, st = mtp1_decode(target, list(p), n)
                tm = s.elapsed_ms()
        finally:
            del target.hidden, target.mtp_hidden
        out.append(
            {
                "greedy": g,
                "mtp1": _ints(m),
                "accepted": _ints(st.get("accepted", [])),
                "greedy_ms": (tg - pre) / n,
                "mtp1_ms": (tm - pre) / n,
                "mtp_feeds": _drafting_feeds(events),
            }
        )
    return out


def _watch_mtp(target: Any, events: list[tuple[Any, ...]]) -> None:
    """Log every target pass ("t", cache length before it) and every MTP block call ("m", offset,
    pairs) into ``events`` (instance attributes over the model's methods: ``forward`` and
    ``mtp_logits`` call these)."""
    real_hidden, real_mtp = target.hidden, target.mtp_hidden

    def hidden(ids: Any, *a: Any, **k: Any) -> Any:
        cache = a[0] if a else k.get("cache")
        events.append(("t", -1 if cache is None else int(cache.length)))
        return real_hidden(ids, *a, **k)

    def mtp_hidden(h: Any, next_ids: Any, *a: Any, **k: Any) -> Any:
        offset = a[1] if len(a) > 1 else k.get("offset", 0)
        try:
            pairs = int(torch.as_tensor(next_ids).shape[-1])
        except (TypeError, ValueError, RuntimeError, IndexError):
            pairs = -1
        events.append(("m", int(offset), pairs))
        return real_mtp(h, next_ids, *a, **k)

    target.hidden, target.mtp_hidden = hidden, mtp_hidden


def _drafting_feeds(events: list[tuple[Any, ...]]) -> list[tuple[int, int, int]]:
    """For every target pass after the prefill that an MTP call comes right before (the call
    that drafted the token it verifies): (offset, pairs, the position of the pass's first token)."""
    return [
        (e[1], e[2], t[1]) for e, t in zip(events, events[1:], strict=False) if e[0] == "m" and t[0] == "t"
    ]


def parallel(weights: str, cases: list[tuple[torch.Tensor, int]]) -> list[dict[str, Any]]:
    from dspark.draft import parallel_draft

    _, drafter = _models(weights)
    out = []
    for ctx, last in cases:
        with _session() as s:
            lg = parallel_draft(drafter, ctx.clone(), int(last))
            launches = s.report().launches
        out.append({"logits": torch.as_tensor(lg).detach().float(), "launches": launches})
    return out


def correction(weights: str, cases: list[tuple[torch.Tensor, int]]) -> list[dict[str, Any]]:
    from dspark.draft import correct

    _, drafter = _models(weights)
    out = []
    for lg, last in cases:
        tokens, corrected = correct(drafter, lg.clone(), int(last))
        out.append({"tokens": _ints(tokens), "corrected": torch.as_tensor(corrected).detach().float()})
    return out


def confidence(
    weights: str,
    logits: list[torch.Tensor],
    length_cases: list[tuple[list[float], float]],
    block_cases: list[tuple[torch.Tensor, int, float]],
) -> dict[str, Any]:
    draft = importlib.import_module("dspark.draft")
    config = importlib.import_module("config")
    _, drafter = _models(weights)
    conf = [torch.as_tensor(draft.draft_confidence(lg.clone())).detach().float() for lg in logits]
    lengths = [int(draft.confident_length(torch.tensor(c), float(t))) for c, t in length_cases]
    blocks = []
    for ctx, last, tau in block_cases:
        with _session() as s:
            tokens, q, c = draft.draft_block(drafter, ctx.clone(), int(last), float(tau))
            launches = s.report().launches
        blocks.append(
            {
                "tokens": _ints(tokens),
                "q": torch.as_tensor(q).detach().float(),
                "conf": torch.as_tensor(c).detach().float(),
                "launches": launches,
            }
        )
    tau = getattr(config, "TAU", None)
    return {"conf": conf, "lengths": lengths, "blocks": blocks, "tau": None if tau is None else float(tau)}


def verify(
    greedy_cases: list[tuple[torch.Tensor, list[int]]],
    residual_cases: list[tuple[torch.Tensor, torch.Tensor]],
    sampling: tuple[torch.Tensor, torch.Tensor, int, int] | None,
) -> dict[str, Any]:
    from dspark.verify import residual, verify_greedy, verify_sampling

    g = []
    for lg, d in greedy_cases:
        a, emitted = verify_greedy(lg.clone(), list(d))
        g.append((int(a), _ints(emitted)))
    r = [torch.as_tensor(residual(p.clone(), q.clone())).detach().double() for p, q in residual_cases]
    samples: list[tuple[int, list[int]]] = []
    if sampling is not None:
        p, q, trials, seed = sampling
        gen = torch.Generator().manual_seed(seed)
        # every trial's draft drawn from q up front, one call per position (a call per token cost
        # a third of the test); the verifier's own draws then come from the same generator
        drafts = torch.stack(
            [torch.multinomial(q[i], trials, replacement=True, generator=gen) for i in range(q.shape[0])], 1
        ).tolist()
        for draft in drafts:
            a, emitted = verify_sampling(p.clone(), q.clone(), [int(x) for x in draft], gen)
            samples.append((int(a), _ints(emitted)))
    return {"greedy": g, "residual": r, "samples": samples}


def decode_each(weights: str, cases: list[tuple[Any, ...]], n: int) -> list[dict[str, Any]]:
    """``decode(weights, [prompt], n, tau)[0]`` for each ``(prompt, tau)`` or ``(prompt, tau, n)``:
    one child for several runs."""
    return [decode(weights, [c[0]], c[2] if len(c) > 2 else n, c[1])[0] for c in cases]


def decode(weights: str, prompts: list[list[int]], n: int, tau: float | None) -> list[dict[str, Any]]:
    """The attendee's loop, with every draft_block call and every target pass recorded."""
    dmod = importlib.import_module("dspark.draft")
    loop = importlib.import_module("dspark.decode")
    if tau is None:
        tau = float(importlib.import_module("config").TAU)
    target, drafter = _models(weights)
    out = []
    for p in prompts:
        drafts: list[list[int]] = []
        passes: list[list[int]] = []
        ctxs: list[torch.Tensor] = []
        offsets: list[int] = []
        waited: list[bool] = []
        real_block = dmod.draft_block

        def block(*a: Any, _real: Any = real_block, _log: list = drafts, _ctx: list = ctxs, **k: Any) -> Any:
            c = a[1] if len(a) > 1 else k.get("context_hidden")
            _ctx.append(torch.as_tensor(c).detach().float().reshape(-1).clone())
            res = _real(*a, **k)
            _log.append(_ints(res[0]))
            return res

        real_hidden = target.hidden

        def hidden(
            ids: torch.Tensor,
            *a: Any,
            _real: Any = real_hidden,
            _log: list = passes,
            _at: list = offsets,
            _waited: list = waited,
            **k: Any,
        ) -> torch.Tensor:
            cache = a[0] if a else k.get("cache")
            _at.append(-1 if cache is None else int(cache.length))
            _log.append(_ints(ids))
            # has the stream this pass runs on waited for every op issued on `draft` so far?
            sess = emu.current()
            _waited.append(sess is None or sess.stream_ms(sess.current_stream) >= sess.stream_ms("draft"))
            return _real(ids, *a, **k)

        pre = _prefill_ms(target, p)
        dmod.draft_block = block
        if hasattr(loop, "draft_block"):
            loop.draft_block = block
        target.hidden = hidden
        try:
            with _session() as s:
                tokens, stats = loop.dspark_decode(target, drafter, list(p), n, tau)
                elapsed = s.elapsed_ms()
                streams = s.report().time_by_stream()
        finally:
            dmod.draft_block = real_block
            if hasattr(loop, "draft_block"):
                loop.draft_block = real_block
            del target.hidden
        out.append(
            {
                "tokens": _ints(tokens),
                "accepted": _ints(stats.get("accepted", [])),
                "drafted": _ints(stats.get("drafted", [])),
                "drafts": drafts,
                "contexts": ctxs,
                "passes": passes[1:] if passes and passes[0] == list(p) else passes,
                "offsets": offsets[1:] if passes and passes[0] == list(p) else offsets,
                "waited": waited[1:] if passes and passes[0] == list(p) else waited,
                "tpot_ms": (elapsed - pre) / n,
                "streams": streams,
            }
        )
    return out


def report_runs(weights: str, prompts: list[list[int]], n: int, tau: float) -> dict[str, Any]:
    """What the report measures, in one child: MTP1 and the DSpark loop on each prompt."""
    return {"mtp1": baseline(weights, prompts, n, greedy=False), "dspark": decode(weights, prompts, n, tau)}


def figures(
    runs: list[dict[str, Any]], block_size: int, tpot_mtp1: float, tpot_dspark: float
) -> dict[str, Any]:
    rep = importlib.import_module("make_report")
    f = rep.figures(runs, block_size, tpot_mtp1, tpot_dspark)
    return {
        k: (float(v) if not isinstance(v, (list, tuple)) else [float(x) for x in v]) for k, v in f.items()
    }


def figures_each(cases: list[tuple[list[dict[str, Any]], int, float, float]]) -> list[dict[str, Any]]:
    """:func:`figures` of every ``(runs, block_size, tpot_mtp1, tpot_dspark)``, in one child."""
    return [figures(*c) for c in cases]
