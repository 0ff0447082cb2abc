"""Serve a list of requests in one emulation session and measure them (used by the scripts and
by the checkers, which call :func:`serve` in a child process and judge what it returns).

A request is a token list; its first ``prefill_len`` tokens are the prompt and the rest are fed
one per decode step (a fixed transcript, so every configuration decodes the very same tokens
and the outputs can be compared logit by logit).
"""

from __future__ import annotations

import torch
from dsv4flash import Checkpoint, Tokenizer, make_prompt, toy_scale, vocabulary
from dsv4flash.corpus import TOPICS
from labkit import emu

from . import recipe as recipe_mod
from .engine import OffloadEngine

#: the prompts the scripts use (the checkers measure H on prompts made with other seeds)
EVAL_SEED = 1


def make_requests(
    seed: int = EVAL_SEED, n_prompt: int = 96, n_decode: int = 32, topics: list[str] | None = None
) -> list[list[int]]:
    """One request per topic: ``n_prompt`` tokens of topic text then ``n_decode`` more to decode."""
    tok = Tokenizer(vocabulary(Checkpoint.load().cfg.vocab_size))
    return [tok.encode(make_prompt(t, n_prompt + n_decode, seed)) for t in (topics or list(TOPICS))]


def serve(
    requests: list[list[int]],
    prefill_len: int,
    overrides: dict[str, object] | None = None,
    logits: bool = True,
) -> dict[str, object]:
    """Run every request through one engine; returns measurements (plain data)."""
    torch.set_num_threads(1)
    rec = recipe_mod.load(overrides)
    ckpt = Checkpoint.load()
    out: dict[str, object] = {"recipe": rec.to_dict(), "requests": []}
    with emu.session(rec.PROFILE, graph_mode=True, scale=toy_scale(ckpt.cfg), measurer=False) as s:
        engine = OffloadEngine(ckpt, rec, s)
        engine.load()
        s.synchronize()
        out["load_ms"] = s.elapsed_ms()
        out["static_bytes"] = s.memory.used
        out["used_by_tag_after_load"] = s.memory.used_by_tag()
        for ids in requests:
            engine.slots = {"prefill": [0, 0], "decode": [0, 0]}
            t0 = s.elapsed_ms()
            first = engine.prefill(ids[:prefill_len])[-1]
            s.synchronize()
            t1 = s.elapsed_ms()
            rows = [first]
            for tok in ids[prefill_len:]:
                rows.append(engine.decode(tok))
            s.synchronize()
            t2 = s.elapsed_ms()
            n_dec = len(ids) - prefill_len
            hits, slots = engine.slots["decode"]
            req: dict[str, object] = {
                "prefill_tokens": prefill_len,
                "prefill_ms": t1 - t0,
                "streamed_prefill": engine.streamed_prefill,
                "decode_tokens": n_dec,
                "decode_ms": t2 - t1,
                "tpot_ms": (t2 - t1) / n_dec if n_dec else 0.0,
                "hits": hits,
                "slots": slots,
                "resident": engine.resident_sets(),
                "prefill_routing": [(layer, ids_.clone()) for layer, ids_ in engine.routing],
            }
            if logits:
                req["logits"] = torch.stack(rows)
            out["requests"].append(req)  # type: ignore[union-attr]
        rep = s.report()
    reqs = out["requests"]
    hits = sum(r["hits"] for r in reqs)  # type: ignore[index,misc]
    slots = sum(r["slots"] for r in reqs)  # type: ignore[index,misc]
    dec_ms = sum(r["decode_ms"] for r in reqs)  # type: ignore[index,misc]
    dec_n = sum(r["decode_tokens"] for r in reqs)  # type: ignore[index,misc]
    out.update(
        hit_rate=hits / slots if slots else 0.0,
        tpot_ms=dec_ms / dec_n if dec_n else 0.0,
        decode_tok_s=1000.0 * dec_n / dec_ms if dec_ms else 0.0,
        capacity_bytes=rep.capacity_bytes,
        peak_bytes=rep.peak_memory_bytes,
        peak_by_tag=rep.peak_by_tag,
        streams={k: {"busy_ms": v.busy_ms, "ops": v.ops} for k, v in rep.streams.items()},
        engines_busy_ms=rep.engines_busy_ms,
        serial_ms=rep.serial_ms,
        elapsed_ms=rep.elapsed_ms,
        overlap_ms=rep.overlap_ms,
        h2d_bytes=rep.h2d_bytes,
        d2h_bytes=rep.d2h_bytes,
        op_bytes={k: v.bytes for k, v in rep.ops.items()},
        op_ms={k: v.time_ms for k, v in rep.ops.items()},
    )
    return out
