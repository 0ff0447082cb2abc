"""Shared helpers of the dspark-spec checkers (trusted side).

The models come from labkit and from the lab's pristine ``starter/weights`` on the server, never
from the workspace. The reference implementations below are the checker's own (written from the
rules in the step text, independent of ``solution/``); attendee code runs only in a child process
through ``harness.py``. Prompts are derived from ``LAB_RUN_ID`` (unseen by the attendee, whose
scripts use seed 0) plus fixed boundary cases.

Lossless: :func:`expect_greedy` proves that tokens are the target's greedy decode with one
target pass over prompt + tokens (teacher forcing): token i must be the target's choice after
the prompt and tokens 0..i-1, which is what decoding token by token would have chosen, at the
cost of one pass instead of n. Ties: a pass over many tokens computes the same logits as a pass
over one token in a different order, so the two can differ in the last bits. Where the top-2
logit margin is under :data:`TIE` a different token is a near tie, counted and reported, not a
failure (the solution meets none on the fixed prompts).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import torch
from labkit import emu
from labkit.check import Failure, msg, run_function
from labkit.dspark import BlockDrafter, load_drafter
from labkit.models import TinyMoE, WordTokenizer, corpus, load_tiny_moe

HERE = Path(__file__).resolve().parent
LAB_SRC = HERE.parent / "starter"
WEIGHTS = str(LAB_SRC / "weights" / "drafter")
HARNESS = str(HERE / "harness.py")
PROFILE = "950DT"
TIE = 1e-3
torch.set_num_threads(1)

_MODELS: dict[str, Any] = {}


def models() -> tuple[TinyMoE, BlockDrafter, WordTokenizer]:
    if not _MODELS:
        target, tok = load_tiny_moe()
        _MODELS.update(target=target, drafter=load_drafter(WEIGHTS), tok=tok)
    return _MODELS["target"], _MODELS["drafter"], _MODELS["tok"]


def run_seed(salt: str) -> int:
    rid = os.environ.get("LAB_RUN_ID", "local")
    return int.from_bytes(hashlib.sha256(f"{rid}/{salt}".encode()).digest()[:4], "little")


def heldout_prompts(n: int, salt: str) -> list[list[int]]:
    """``n`` prompts of 6-16 tokens from corpus paragraphs made with a seed of this run."""
    _, _, tok = models()
    seed = run_seed(salt)
    rng = random.Random(seed)
    return [
        tok.encode(p.text, bos=True)[: rng.randint(6, 16)]
        for p in corpus.make_corpus(n, seed=seed % 100_000 + 1)
    ]


def session() -> emu.EmuSession:
    return emu.session(PROFILE, graph_mode=True, measurer=False)  # emulated on a card too


def call(func: str, *args: Any, hint: str, timeout: float = 60) -> Any:
    """``harness.py: func(*args)`` in a child; a TODO still in the starter is said as such."""
    res = run_function(HARNESS, func, *args, timeout=timeout, memory_mb=2048)
    err = res.error
    if err is not None and err.type == "NotImplementedError":
        where = next((f"{f.file}:{f.line}" for f in reversed(err.frames)), "dspark/")
        raise Failure(
            msg(
                f"`{err.message}` is not written yet: fill in its TODO ({where}).",
                f"`{err.message}` 还没有实现：请补全它的 TODO（{where}）。",
            ),
            [hint],
        )
    if err is not None and err.type == "ValueError" and "KV cache full" in err.message:
        raise Failure(
            msg(
                f"Your code ran out of KV cache ({err.message}): the positions of rejected draft tokens were not "
                "rolled back out of the cache (cache.length), or the cache was made too small: the last verify pass "
                f"can start one token short of n with a whole block after it.\n{err.format()}",
                f"你的代码用完了 KV 缓存（{err.message}）：被拒绝的草稿 token 的位置没有从缓存中回退（cache.length），"
                f"或者缓存开得太小：最后一次验证前向可能在还差一个 token 到 n 时开始，后面跟着整整一个块。\n{err.format()}",
            ),
            [hint],
        )
    if err is not None and err.phase == "call" and err.frames:
        # the harness is ours: name the attendee's exception and frames, not the harness
        raise Failure(
            msg(
                f"Your code raised {err.type}: {err.message}\n{err.format()}",
                f"你的代码抛出了 {err.type}：{err.message}\n{err.format()}",
            ),
            [hint],
        )
    return res.unwrap(hint)


# -- references ---------------------------------------------------------------------------------
@torch.no_grad()
def ref_greedy(prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """The target's greedy tokens and the top-2 logit margin at each."""
    target, _, _ = models()
    cache = target.new_cache(1, len(prompt) + n)
    logits = target(torch.tensor([prompt]), cache)
    toks: list[int] = []
    margins: list[float] = []
    while True:
        top = logits[0, -1].topk(2)
        toks.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        if len(toks) == n:
            return toks, margins
        logits = target(torch.tensor([[toks[-1]]]), cache)


def expect_lossless(got: list[int], ref: list[int], margins: list[float], what: str, hint: str) -> int:
    """Failure unless ``got`` equals ``ref`` (up to a near tie, after which nothing is compared)."""
    if len(got) != len(ref):
        raise Failure(
            msg(
                f"{what} returned {len(got)} tokens, expected exactly {len(ref)}.",
                f"{what} 返回了 {len(got)} 个 token，应当正好 {len(ref)} 个。",
            ),
            [hint],
        )
    for i, (a, b) in enumerate(zip(got, ref, strict=True)):
        if a != b:
            if margins[i] < TIE:
                return 1
            _, _, tok = models()
            raise Failure(
                msg(
                    f"{what} is not lossless: token {i} is {tok.decode([a], skip_special=False)!r} but the target's greedy "
                    f"decode says {tok.decode([b], skip_special=False)!r} (top-2 logit margin {margins[i]:.3f}, not a tie). "
                    f"Same until then: {tok.decode(ref[:i], skip_special=False)!r}. Check that rejected positions are rolled back "
                    "out of the KV cache and that no token is emitted without verification.",
                    f"{what} 不是无损的：第 {i} 个 token 是 {tok.decode([a], skip_special=False)!r}，而目标模型的贪心解码是 "
                    f"{tok.decode([b], skip_special=False)!r}（前两名 logit 之差 {margins[i]:.3f}，不是并列）。"
                    f"此前一致：{tok.decode(ref[:i], skip_special=False)!r}。检查被拒绝的位置是否已从 KV 缓存中回退，"
                    "以及是否有未经验证就输出的 token。",
                ),
                [hint],
            )
    return 0


@torch.no_grad()
def expect_greedy(got: Any, prompt: list[int], n: int, what: str, hint: str) -> tuple[int, torch.Tensor]:
    """Failure unless ``got`` is the target's greedy decode of ``n`` tokens after ``prompt`` (up to
    a near tie, after which nothing is compared); returns (near ties, the target's hidden states
    over prompt + got from the same pass)."""
    target, _, _ = models()
    toks = [int(t) for t in got] if isinstance(got, list) else []
    if len(toks) != n:
        raise Failure(
            msg(
                f"{what} returned {len(toks)} tokens, expected exactly {n}.",
                f"{what} 返回了 {len(toks)} 个 token，应当正好 {n} 个。",
            ),
            [hint],
        )
    if any(not 0 <= t < target.cfg.vocab_size for t in toks):
        raise Failure(
            msg(
                f"{what} returned token ids outside the vocabulary (0 .. {target.cfg.vocab_size - 1}): {toks}.",
                f"{what} 返回了词表之外的 token 编号（0 .. {target.cfg.vocab_size - 1}）：{toks}。",
            ),
            [hint],
        )
    hidden = target.hidden(torch.tensor([prompt + toks]))
    top = target.logits(hidden[:, len(prompt) - 1 : -1])[0].topk(2, dim=-1)
    ref = top.indices[:, 0].tolist()
    margins = (top.values[:, 0] - top.values[:, 1]).tolist()
    return expect_lossless(toks, ref, margins, what, hint), hidden[0]


_PREFILL: dict[tuple[int, ...], float] = {}


@torch.no_grad()
def prefill_ms(prompt: list[int]) -> float:
    """Emulated time of the prefill (a function of the prompt only: computed once per prompt)."""
    key = tuple(prompt)
    if key not in _PREFILL:
        target, _, _ = models()
        with session() as s:
            target(torch.tensor([prompt]), target.new_cache(1, len(prompt)))
            _PREFILL[key] = s.elapsed_ms()
    return _PREFILL[key]


@torch.no_grad()
def ref_mtp1(prompt: list[int], n: int) -> tuple[float, list[int]]:
    """(emulated TPOT ms, accepted per step) of MTP1 decoding, the checker's own loop."""
    target, _, _ = models()
    with session() as s:
        cache = target.new_cache(1, len(prompt) + n + 2)
        h = target.hidden(torch.tensor([prompt]), cache)
        out = [int(target.logits(h[:, -1:])[0, -1].argmax())]
        mh, mids, moff = h, torch.tensor([prompt[1:] + out]), 0
        acc: list[int] = []
        while len(out) < n:
            pos = cache.length
            d = int(target.mtp_logits(mh, mids, cache, offset=moff)[0, -1].argmax())
            hv = target.hidden(torch.tensor([[out[-1], d]]), cache)
            best = target.logits(hv)[0].argmax(-1).tolist()
            if best[0] == d:
                out += [d, best[1]]
                acc.append(1)
                mh, mids, moff = hv, torch.tensor([[d, best[1]]]), pos
            else:
                out.append(best[0])
                acc.append(0)
                cache.length = pos + 1
                mh, mids, moff = hv[:, :1], torch.tensor([[best[0]]]), pos
        total = s.elapsed_ms()
    return (total - prefill_ms(prompt)) / n, acc


@torch.no_grad()
def ref_parallel(ctx: torch.Tensor, last: int) -> torch.Tensor:
    _, d, _ = models()
    return d(ctx.reshape(1, -1), torch.tensor([[last] + [d.mask_id] * (d.block_size - 1)]))[0]


@torch.no_grad()
def ref_correct(logits: torch.Tensor, last: int) -> tuple[list[int], torch.Tensor, list[float]]:
    """Tokens, corrected logits and the top-2 margin of each corrected row."""
    _, d, _ = models()
    prev, toks, rows, margins = last, [], [], []
    for j in range(logits.shape[0]):
        row = logits[j] + d.markov_logits(torch.tensor([prev]))[0]
        top = row.topk(2)
        prev = int(top.indices[0])
        toks.append(prev)
        rows.append(row)
        margins.append(float(top.values[0] - top.values[1]))
    return toks, torch.stack(rows), margins


def ref_confidence(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.double(), -1).amax(-1)


def ref_length(conf: list[float], tau: float) -> int:
    """The longest prefix whose running product of confidences is >= tau; at least one."""
    n, run = 0, 1.0
    while n < len(conf):
        run *= conf[n]
        if run < tau:
            break
        n += 1
    return max(1, n)


@torch.no_grad()
def ref_decode(prompt: list[int], n: int, tau: float) -> dict[str, Any]:
    """The checker's DSpark loop: tokens, accepted/drafted per iteration, emulated TPOT."""
    target, d, _ = models()
    with session() as s:
        cache = target.new_cache(1, len(prompt) + n + d.block_size + 2)
        h = target.hidden(torch.tensor([prompt]), cache)
        ctx = h[0, -1]
        out = [int(target.logits(h[:, -1:])[0, -1].argmax())]
        acc: list[int] = []
        drafted: list[int] = []
        while len(out) < n:
            pos = cache.length
            with s.stream("draft"):
                lg = ref_parallel(ctx, out[-1])
                k = ref_length(ref_confidence(lg).tolist(), tau)
                draft, _, _ = ref_correct(lg[:k], out[-1])
            s.wait_stream("draft")
            hv = target.hidden(torch.tensor([[out[-1], *draft]]), cache)
            best = target.logits(hv)[0].argmax(-1).tolist()
            a = 0
            while a < len(draft) and draft[a] == best[a]:
                a += 1
            out += draft[:a] + [best[a]]
            cache.length = pos + 1 + a
            ctx = hv[0, a]
            acc.append(a)
            drafted.append(len(draft))
        total = s.elapsed_ms()
    return {
        "tokens": out[:n],
        "accepted": acc,
        "drafted": drafted,
        "tpot_ms": (total - prefill_ms(prompt)) / n,
    }


def contexts(n: int, salt: str) -> list[tuple[torch.Tensor, int]]:
    """(target hidden state at a position, the token after it) from this run's prompts."""
    target, _, _ = models()
    out = []
    with torch.no_grad():
        for p in heldout_prompts(n, salt):
            h = target.hidden(torch.tensor([p]))
            out.append((h[0, -2].clone(), int(p[-1])))
    return out


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit: P(X >= stat) for X ~ chi2(len(probs) - 1)."""
    exp = probs.double() * float(counts.sum())
    stat = float(((counts.double() - exp) ** 2 / exp).sum())
    return float(torch.special.gammaincc(torch.tensor((len(probs) - 1) / 2.0), torch.tensor(stat / 2.0)))


def read_json(name: str, hint: str) -> dict[str, Any]:
    path = Path(name)
    if not path.is_file():
        raise Failure(msg(f"There is no {name} in the lab folder yet.", f"实验目录里还没有 {name}。"), [hint])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise Failure(
            msg(f"{name} is not valid JSON: {exc}", f"{name} 不是合法的 JSON：{exc}"), [hint]
        ) from exc
    if not isinstance(data, dict):
        raise Failure(msg(f"{name} must hold a JSON object.", f"{name} 必须是一个 JSON 对象。"), [hint])
    return data


__all__ = ["Failure", "msg", "sys"]
