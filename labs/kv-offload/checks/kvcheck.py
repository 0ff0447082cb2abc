"""Shared helpers of the kv-offload checkers (trusted side).

The model, the emulator and the reference decode come from the installed ``labkit`` (never from
the workspace). Attendee code runs only in a child process, through ``kvharness.py`` beside this
file (``labkit.check.run_function`` with its absolute path), on inputs derived from
``LAB_RUN_ID``: texts, seeds and pool sizes the attendee's own scripts never used (they use
seed 1)."""

from __future__ import annotations

import hashlib
import math
import os
import random
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
from labkit import dsa, emu
from labkit.check import Failure, msg, run_function

torch.set_num_threads(1)

HARNESS = str(Path(__file__).resolve().parent / "kvharness.py")
CFG = dsa.DSAConfig()
PROMPT = 1024
#: the same computation on the same inputs: only a different summation order could move a
#: logit, far below this (one wrong KV row moves them by ~0.1 x std)
LOGIT_TOL = 1e-4


def run_seed(salt: str = "") -> int:
    """A seed from ``LAB_RUN_ID`` (fresh per check run), never 1 (the workspace's seed)."""
    rid = os.environ.get("LAB_RUN_ID", "local") + salt
    return 2 + int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16) % 100_000


def rng(salt: str = "") -> random.Random:
    return random.Random(run_seed(salt))


def capacity() -> int:
    with emu.session(dsa.LAB_PROFILE, scale=dsa.LAB_SCALE, measurer=False) as s:
        return s.memory.capacity


def ref_kv_bytes(cfg: dsa.DSAConfig, total: int) -> int:
    return cfg.n_layers * total * cfg.kv_entry_bytes + cfg.n_groups * total * cfg.idx_entry_bytes


def ref_max_batch(cfg: dsa.DSAConfig, cap: int, total: int) -> int:
    return max(0, (cap - dsa.ToyDSA(cfg).weight_bytes()) // ref_kv_bytes(cfg, total))


def harness(func: str, *args: Any, hint: str, timeout: float = 120) -> Any:
    res = run_function(HARNESS, func, *args, timeout=timeout, memory_mb=3072)
    return res.unwrap(hint)


class Calls:
    """Several harness calls in one child process (one fork, one import of the attendee's
    package). When the attendee's code raises in any of them, each call runs again in its own
    child when its result is asked for, so the checker reports the same failure, in the same
    order, as with one child per call."""

    def __init__(self, calls: list[tuple[str, list[Any]]], hint: str, timeout: float = 120):
        self.calls, self.hint, self.timeout = calls, hint, timeout
        res = run_function(HARNESS, "each", calls, timeout=timeout * len(calls), memory_mb=3072)
        ok = res.error is None and isinstance(res.value, list) and len(res.value) == len(calls)
        self.values: list[Any] | None = res.value if ok else None

    def __getitem__(self, i: int) -> Any:
        if self.values is not None:
            return self.values[i]
        func, args = self.calls[i]
        return harness(func, *args, hint=self.hint, timeout=self.timeout)


def prefill(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts' (KV, indexer keys) of ``tokens`` ``[B, PROMPT + T]``, computed here (trusted)
    once for the checker's reference and every child that decodes the same texts."""
    return dsa.prefill_batch(dsa.ToyDSA(CFG), tokens[:, :PROMPT])


def tiled(
    seed: int, distinct: int, batch: int, n_steps: int
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``batch`` rows of ``PROMPT + n_steps`` tokens made of ``distinct`` unseen texts in turn
    (A B C D A B ...), and their prefill: each text is prefilled once."""
    texts = dsa.make_batch(seed, distinct, PROMPT + n_steps)
    kv, idx = prefill(texts)
    rows = torch.arange(batch) % distinct
    return texts[rows], (kv[rows], idx[rows])


def reference(tokens: torch.Tensor, pre: tuple[torch.Tensor, torch.Tensor]) -> dsa.DecodeResult:
    """The baseline decode (the whole KV in one tensor) of ``tokens`` from the prefill ``pre``."""
    return dsa.run_decode(dsa.ToyDSA(CFG), *pre, tokens[:, PROMPT:], dsa.ReferenceKV())


def run_call(call: tuple[str, list[Any]], hint: str, timeout: float = 120) -> Any:
    """One :class:`Calls` entry in a child of its own."""
    return harness(call[0], *call[1], hint=hint, timeout=timeout)


def decode_call(
    kind: str,
    tokens: torch.Tensor,
    pre: tuple[torch.Tensor, torch.Tensor],
    opts: dict[str, Any] | None = None,
    warmup: int = 0,
) -> tuple[str, list[Any]]:
    """A :class:`Calls` entry: the attendee's store ``kind`` decoding ``tokens`` from ``pre``."""
    return ("decode", [kind, tokens, PROMPT, opts or {}, warmup, pre])


def compare_logits(got: dict[str, Any], ref: torch.Tensor, what: str, hint: str) -> float:
    e = got.get("logits")
    if not isinstance(e, torch.Tensor) or e.shape != ref.shape:
        raise Failure(
            msg(
                f"{what}: the decode returned logits of shape {getattr(e, 'shape', None)}, expected {tuple(ref.shape)}.",
                f"{what}：解码返回的 logits 形状为 {getattr(e, 'shape', None)}，应为 {tuple(ref.shape)}。",
            ),
            [hint],
        )
    diff = (e.float() - ref).abs().amax(-1) / ref.std()  # [B, T]
    worst = float(diff.max())
    if math.isnan(worst) or worst > LOGIT_TOL:
        bad = (diff > LOGIT_TOL) | diff.isnan()
        b, t = (int(x) for x in bad.nonzero()[0])
        raise Failure(
            msg(
                f"{what}: the output differs from the baseline (the whole KV cache on the device) from decode step {t} "
                f"of sequence {b} on: max |Δlogit| = {worst:.3g} x std. Some layer attended over KV entries that are "
                "not the ones the indexer selected (wrong layer, wrong position, stale data or a missing new token).",
                f"{what}：从序列 {b} 的第 {t} 个解码步起，输出与基线（整份 KV 缓存在卡上）不一致：max |Δlogit| = "
                f"{worst:.3g} 倍标准差。某一层注意力用到的 KV 不是索引器选中的那些（层错了、位置错了、数据过期或缺了新 token）。",
            ),
            [hint],
        )
    return worst


def oom(got: dict[str, Any], what: str, hint: str) -> None:
    if "oom" in got:
        raise Failure(
            msg(
                f"{what}: the emulated device ran out of memory:\n{got['oom']}",
                f"{what}：仿真设备内存不足：\n{got['oom']}",
            ),
            [hint],
        )


# -- reference pools (the rules of step 4) -----------------------------------------------------
def ref_lru(n_slots: int, steps: list[list[int]]) -> list[list[bool]]:
    where: OrderedDict[int, None] = OrderedDict()
    out = []
    for ids in steps:
        hit = [i in where for i in ids]
        for i, h in zip(ids, hit, strict=True):
            if h:
                where.move_to_end(i)
        for i, h in zip(ids, hit, strict=True):
            if not h:
                where[i] = None
                if len(where) > n_slots:
                    where.popitem(last=False)
        out.append(hit)
    return out


def ref_fifo(
    n_slots: int, steps: list[list[int]], ways: int = 8, hits_advance: bool = False, hash_sets: bool = True
) -> list[list[bool]]:
    n_sets = n_slots // ways
    tags = [[-1] * ways for _ in range(n_sets)]
    ptr = [0] * n_sets
    out = []
    for ids in steps:
        sets = [dsa.set_index(i, n_sets) if hash_sets else i % n_sets for i in ids]
        hit = [i in tags[s] for i, s in zip(ids, sets, strict=True)]
        if hits_advance:  # the mistake: a hit moves its set's pointer past it
            for i, s, h in zip(ids, sets, hit, strict=True):
                if h:
                    ptr[s] = (tags[s].index(i) + 1) % ways
        for i, s, h in zip(ids, sets, hit, strict=True):
            if not h:
                tags[s][ptr[s]] = i
                ptr[s] = (ptr[s] + 1) % ways
        out.append(hit)
    return out


def ref_hit_rate(trace: torch.Tensor, policy: str, n_slots: int) -> float:
    T, G, B, k = trace.shape
    hits = total = 0
    for g in range(G):
        for b in range(B):
            steps = [trace[t, g, b].tolist() for t in range(T)]
            plans = ref_lru(n_slots, steps) if policy == "lru" else ref_fifo(n_slots, steps)
            for h in plans[1:]:
                hits += sum(h)
                total += len(h)
    return hits / total


def ref_overlap(trace: torch.Tensor) -> float:
    T, G, B, k = trace.shape
    vals = []
    for g in range(G):
        for b in range(B):
            s = [set(trace[t, g, b].tolist()) for t in range(T)]
            vals.append(sum(len(s[t] & s[t - 1]) / len(s[t]) for t in range(1, T)) / (T - 1))
    return sum(vals) / len(vals)


def model_trace(seed: int, batch: int, n_steps: int) -> torch.Tensor:
    """The indexer's top-k ``[n_steps, groups, batch, k]`` decoding ``batch`` unseen texts."""
    tokens = dsa.make_batch(seed, batch, PROMPT + n_steps)
    return reference(tokens, prefill(tokens)).trace
