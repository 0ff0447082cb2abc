"""The checker's tau sweep (step 4) in a few batched passes: what :func:`dsparkcheck.ref_decode`
gives at every tau of a grid, per prompt, without running the loop once per tau.

Why it can: the loop is lossless, so at every tau an iteration starts from the same state, the
target's greedy tokens ``g[:c]`` (its *cursor* ``c``), and what it does there depends on ``c``
and on how many positions ``k`` the tau keeps, nothing else:

- the draft: one drafter pass from the target's hidden state at the position that produced
  ``g[c - 1]``, its confidences, and its sequential correction; the first ``k`` corrected tokens
  are the draft at any tau (row ``j`` of the correction depends only on rows before it);
- the verify pass over ``[g[c - 1], *draft[:k]]`` at cache position ``len(prompt) + c - 1``:
  ``accepted = min(k, m)`` with ``m`` the draft's match length against ``g[c:]``; the target is
  causal, so the routing of those ``k + 1`` tokens is the routing of the same tokens in a pass
  over the whole block;
- its emulated time: every device op runs on one engine, so an iteration costs the sum of its
  ops' durations: the draft (a function of ``k``), the verify pass's ops of fixed shape (a
  function of ``k``), its attention (of ``k`` and the position) and one SwiGLU expert per layer
  and expert it routes to (of the rows that expert gets). Each of these is *measured* once in an
  emulator session on the labkit models themselves (no cost formula is copied here).

So: one batched greedy decode of every prompt (rows with their own positions), one batched
drafter pass and correction over every cursor, the iterations each tau makes (plain arithmetic),
and one batched verify pass over the cursors some tau visits, for their routing. Greedy tokens
come from batched passes and can differ from token-by-token decoding at a near tie (a top-2
logit margin of float rounding); the reference is then another greedy continuation, as valid.
``tests/labs/test_dspark_spec.py`` checks that this gives ``ref_decode``'s iterations and TPOT.
"""

from __future__ import annotations

from typing import Any

import dsparkcheck as dc
import torch
from labkit.models import ops as _ops

DENSE_ROWS = 64  # MoE rows up to which every expert runs on every row (one op instead of a loop)


def _moe(blk: Any, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's MoE on rows ``flat [N, D]`` -> (output, expert ids [N, top_k])."""
    m = blk.moe
    w, idx, _ = m.route(flat)
    if flat.shape[0] <= DENSE_ROWS:
        a, b = torch.einsum("nd,ehd->neh", flat, m.experts_gate_up).chunk(2, dim=-1)
        every = torch.einsum("neh,edh->ned", a * torch.sigmoid(a) * b, m.experts_down)
        picked = every.gather(1, idx.unsqueeze(-1).expand(-1, -1, every.shape[-1]))
        routed = (picked * w.unsqueeze(-1)).sum(1)
    else:
        routed = m.routed(flat, w, idx)
    return routed + m.shared(flat), idx


def _layer(
    blk: Any,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    past: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One target layer on rows ``x [R, S, D]`` that each sit at their own positions (``cos``,
    ``sin`` ``[R or 1, 1, S, Dh]``), attending to ``past`` = (keys, values ``[R, Hkv, P, Dh]``,
    visible ``[R, 1, 1, P]``) and causally to their own S tokens. -> (y, k, v, expert ids)."""
    a = blk.attn
    r, s, d = x.shape
    h = blk.attn_norm(x)
    q = _ops.linear(h, a.wq).view(r, s, a.n_heads, a.hd).transpose(1, 2)
    k = _ops.linear(h, a.wk).view(r, s, a.n_kv, a.hd).transpose(1, 2)
    v = _ops.linear(h, a.wv).view(r, s, a.n_kv, a.hd).transpose(1, 2)
    q, k = _ops.rotary(q, cos, sin), _ops.rotary(k, cos, sin)
    mask = torch.ones(s, s, dtype=torch.bool).tril().expand(r, 1, s, s)
    keys, vals = k, v
    if past is not None:
        keys, vals = torch.cat((past[0], k), 2), torch.cat((past[1], v), 2)
        mask = torch.cat((past[2].expand(r, 1, s, -1), mask), -1)
    rep = a.n_heads // a.n_kv
    keys, vals = keys.repeat_interleave(rep, dim=1), vals.repeat_interleave(rep, dim=1)
    scores = ((q @ keys.transpose(-1, -2)) * (a.hd**-0.5)).masked_fill(~mask, float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ vals).transpose(1, 2).reshape(r, s, a.n_heads * a.hd)
    h = x + _ops.linear(out, a.wo)
    y, idx = _moe(blk, blk.ffn_norm(h).reshape(r * s, d))
    return h + y.view(r, s, d), k, v, idx


def _rope(target: Any, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``[R, 1, S, Dh]`` for positions ``pos [R, S]``."""
    return target.rope_cos[pos].unsqueeze(1), target.rope_sin[pos].unsqueeze(1)


@torch.no_grad()
def _greedy(prompts: list[list[int]], n: int) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
    """Every prompt's ``n`` greedy tokens ``[R, n]``, the hidden states ``[R, T, D]`` and the KV
    ``[(k, v) per layer]`` ``[R, Hkv, T, Dh]`` at every position, in one batch."""
    target, _, _ = dc.models()
    r = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    width = int(lens.max())
    t = width + n
    ids = torch.zeros(r, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    rows = torch.arange(r)
    hidden = torch.zeros(r, t, target.cfg.d_model)
    kv = []
    x = _ops.embedding(ids, target.embed)
    cos, sin = _rope(target, torch.arange(width).expand(r, width))
    for blk in target.layers:
        x, k, v, _ = _layer(blk, x, cos, sin, None)
        kv.append((torch.zeros(r, k.shape[1], t, k.shape[3]), torch.zeros(r, v.shape[1], t, v.shape[3])))
        kv[-1][0][:, :, :width], kv[-1][1][:, :, :width] = (
            k,
            v,
        )  # padding after a prompt: overwritten before seen
    hidden[:, :width] = x
    tok = target.logits(x[rows, lens - 1]).argmax(-1)
    toks, pos = [tok], lens.clone()
    for _ in range(n - 1):
        x = _ops.embedding(tok.unsqueeze(1), target.embed)
        cos, sin = _rope(target, pos.unsqueeze(1))
        visible = (torch.arange(t) < pos.unsqueeze(1)).view(r, 1, 1, t)
        for blk, (kb, vb) in zip(target.layers, kv, strict=True):
            x, k, v, _ = _layer(blk, x, cos, sin, (kb, vb, visible))
            kb[rows, :, pos], vb[rows, :, pos] = k[:, :, 0], v[:, :, 0]
        hidden[rows, pos] = x[:, 0]
        tok = target.logits(x[:, 0]).argmax(-1)
        toks.append(tok)
        pos = pos + 1
    return torch.stack(toks, 1), hidden, kv


class _Costs:
    """Emulated durations (ms), each measured once in a session on the labkit models."""

    def __init__(self) -> None:
        self.target, self.drafter, _ = dc.models()
        self._att: dict[tuple[int, int], float] = {}
        self._logits: dict[int, float] = {}
        d = self.target.cfg.d_model
        blk = self.target.layers[0]
        self.expert = [0.0]  # an expert's SwiGLU on r rows (any expert, any layer: same shapes)
        for r in range(1, self.drafter.block_size + 2):
            with dc.session() as s:
                blk.moe.expert(0, torch.zeros(r, d))
                self.expert.append(s.elapsed_ms())
        self.draft = [0.0]  # a drafter pass and the correction of k positions
        ctx = torch.zeros(self.target.cfg.d_model)
        for k in range(1, self.drafter.block_size + 1):
            with dc.session() as s:
                dc.ref_correct(dc.ref_parallel(ctx, 0)[:k], 0)
                self.draft.append(s.elapsed_ms())
        # a verify pass over s tokens, but its attention and routed experts (measured apart)
        self.fixed = [0.0, 0.0]
        for n in range(2, self.drafter.block_size + 2):
            cache = self.target.new_cache(1, n)
            self.target.trace_routing = []
            with dc.session() as s:
                self.target.logits(self.target.hidden(torch.arange(n).unsqueeze(0), cache))
                ms = s.elapsed_ms()
            routing = self.target.trace_routing
            self.target.trace_routing = None
            experts = sum(
                self.expert[int(c)] for _, idx in routing for c in torch.bincount(idx.reshape(-1)) if c
            )
            self.fixed.append(ms - self.attention(n, n) - experts)

    def attention(self, s: int, t: int) -> float:
        """Every layer's attention of s queries over t keys."""
        if (s, t) not in self._att:
            a = self.target.layers[0].attn
            with dc.session() as ses:  # the same shapes in every layer
                _ops.attention(
                    torch.zeros(1, a.n_heads, s, a.hd),
                    torch.zeros(1, a.n_kv, t, a.hd),
                    torch.zeros(1, a.n_kv, t, a.hd),
                    t - s,
                )
                self._att[s, t] = ses.elapsed_ms() * len(self.target.layers)
        return self._att[s, t]

    def logits(self, rows: int) -> float:
        if rows not in self._logits:
            with dc.session() as s:
                self.target.logits(torch.zeros(1, rows, self.target.cfg.d_model))
                self._logits[rows] = s.elapsed_ms()
        return self._logits[rows]


@torch.no_grad()
def sweep(prompts: list[list[int]], n: int, taus: list[float]) -> list[dict[float, dict[str, Any]]]:
    """Per prompt, per tau: what ``ref_decode(prompt, n, tau)`` returns (tokens, accepted,
    drafted, tpot_ms)."""
    target, drafter, _ = dc.models()
    bs = drafter.block_size
    r = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    greedy, hidden, kv = _greedy(prompts, n + bs - 1)
    # every cursor c = 1 .. n-1 of every prompt: draft from the hidden state of position L + c - 2
    pr = torch.arange(r).repeat_interleave(n - 1)
    cur = torch.arange(1, n).repeat(r)
    last = greedy[pr, cur - 1]
    block = torch.cat((last.unsqueeze(1), torch.full((len(pr), bs - 1), drafter.mask_id)), 1)
    logits = drafter(hidden[pr, lens[pr] + cur - 2], block)
    conf = dc.ref_confidence(logits).tolist()
    prev, drafts = last, []
    for j in range(bs):
        prev = (logits[:, j] + drafter.markov_logits(prev)).argmax(-1)
        drafts.append(prev)
    draft = torch.stack(drafts, 1)
    truth = greedy[pr.unsqueeze(1), cur.unsqueeze(1) + torch.arange(bs)]
    match = (draft == truth).int().cumprod(1).sum(1).tolist()
    # the iterations of every tau: (row of the cursor, k) each
    runs: list[dict[float, list[tuple[int, int]]]] = []
    for i in range(r):
        runs.append({})
        for tau in taus:
            its, c = [], 1
            while c < n:
                row = i * (n - 1) + c - 1
                k = dc.ref_length(conf[row], tau)
                its.append((row, k))
                c += min(k, match[row]) + 1
            runs[i][tau] = its
    # one verify pass over every visited cursor's whole block, for the routing of its tokens
    rows = sorted({row for per in runs for its in per.values() for row, _ in its})
    at = {row: j for j, row in enumerate(rows)}
    sel = torch.tensor(rows)
    p_of, start = pr[sel], lens[pr[sel]] + cur[sel] - 1
    ids = torch.cat((last[sel].unsqueeze(1), draft[sel]), 1)
    t = hidden.shape[1]
    visible = (torch.arange(t) < start.unsqueeze(1)).view(len(rows), 1, 1, t)
    cos, sin = _rope(target, start.unsqueeze(1) + torch.arange(bs + 1))
    costs = _Costs()
    expert_ms = torch.tensor(costs.expert, dtype=torch.float64)
    # routed-expert time of the first s tokens, [row, s - 1]: per layer, the rows each expert gets
    routed_ms = torch.zeros(len(rows), bs + 1, dtype=torch.float64)
    x = _ops.embedding(ids, target.embed)
    for blk, (kb, vb) in zip(target.layers, kv, strict=True):
        x, _, _, idx = _layer(blk, x, cos, sin, (kb[p_of], vb[p_of], visible))
        hits = torch.nn.functional.one_hot(idx, target.cfg.n_routed_experts).sum(1)
        routed_ms += expert_ms[hits.view(len(rows), bs + 1, -1).cumsum(1)].sum(-1)
    out = []
    for i, p in enumerate(prompts):
        res = {}
        for tau, its in runs[i].items():
            ms = costs.logits(1) - costs.logits(len(p))
            toks = greedy[i].tolist()
            acc, drafted = [], []
            for row, k in its:
                c = int(cur[row])
                ms += (
                    costs.draft[k]
                    + costs.fixed[k + 1]
                    + costs.attention(k + 1, len(p) + c + k)
                    + float(routed_ms[at[row], k])
                )
                acc.append(min(k, match[row]))
                drafted.append(k)
            res[tau] = {"tokens": toks[:n], "accepted": acc, "drafted": drafted, "tpot_ms": ms / n}
        out.append(res)
    return out
