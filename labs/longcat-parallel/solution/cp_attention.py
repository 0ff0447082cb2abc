"""Step 2: context-parallel causal attention (ring of KV blocks)."""

import math

import torch
import torch.distributed as dist


def _block(q, k, v, mask):
    """Scaled scores of one KV block -> (unnormalised output, row max, row sum)."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m)
    return p @ v, m, p.sum(-1, keepdim=True)


def cp_attention(q, k, v, rank, world):
    """Rank `rank` holds the contiguous shard `rank` of the sequence: q, k, v [B, H, S/world, D].
    Return this shard's rows of causal attention over the whole sequence."""
    n = q.shape[-2]
    tril_mask = torch.ones(n, n, dtype=torch.bool).triu(1)  # True = masked: keys after the query
    acc = torch.zeros_like(q)
    m_run = torch.full(q.shape[:-1] + (1,), float("-inf"))
    l_run = torch.zeros(q.shape[:-1] + (1,))
    kv = torch.stack([k, v]).contiguous()
    for step in range(world):
        src = (rank - step) % world  # the shard whose KV this rank holds at this step
        if src <= rank:
            o, m, rowsum = _block(q, kv[0], kv[1], tril_mask if src == rank else None)
            m_new = torch.maximum(m_run, m)
            a, b = torch.exp(m_run - m_new), torch.exp(m - m_new)
            acc = acc * a + o * b
            l_run = l_run * a + rowsum * b
            m_run = m_new
        if step < world - 1:  # pass the block on: even ranks send first, odd ranks receive first
            recv = torch.empty_like(kv)
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            if rank % 2 == 0:
                dist.send(kv, nxt)
                dist.recv(recv, prv)
            else:
                dist.recv(recv, prv)
                dist.send(kv, nxt)
            kv = recv
    return acc / l_run
