"""Try your step 2-4 code on 4 processes and compare with one process (not the checker).

python try_ranks.py cp | ep | pp
"""

import sys

import torch
from labkit import dist as ldist
from labkit.longcat import TinyLongcat, causal_attention

WORLD = 4


def cp(rank, world):
    from cp_attention import cp_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4 * world, 8) for _ in range(3))
    out = cp_attention(*(t.chunk(world, 2)[rank].contiguous() for t in (q, k, v)), rank, world)
    return float((out - causal_attention(q, k, v).chunk(world, 2)[rank]).abs().max())


class Experts:
    def __init__(self, m, rank, world):
        self.n_routed, self.n_zero, self.per_rank = m.cfg.n_routed, m.cfg.n_zero, m.cfg.n_routed // world
        self.m, self.rank = m, rank

    def __call__(self, e, rows):
        assert e // self.per_rank == self.rank, f"expert {e} is not on rank {self.rank}"
        return self.m.expert(0, e, rows)


def ep(rank, world):
    from ep_moe import ep_moe

    m = TinyLongcat()
    torch.manual_seed(rank)
    x = torch.randn(5, m.cfg.d_model)
    ids, w = m.route(0, x)
    y = ep_moe(x, ids, w, Experts(m, rank, world), rank, world)
    return float((y - m.moe(0, x, ids, w)).abs().max())


def pp(rank, world):
    from pipeline import pipeline_prefill

    m = TinyLongcat()
    ids = torch.arange(8 * 4).reshape(8, 4) % m.cfg.vocab_size
    x = m.embed(ids)

    def stage(mb):
        ldist.charge(1e-3 * mb.shape[0])
        return m.layer(rank, mb, torch.arange(4))

    y, bubble = pipeline_prefill(x if rank == 0 else torch.empty_like(x), 4, stage, rank, world)
    if y is None:
        return bubble
    ref = x
    for i in range(world):
        ref = m.layer(i, ref, torch.arange(4))
    return bubble, float((y - ref).abs().max())


if __name__ == "__main__":
    res = ldist.run_ranks(__file__, sys.argv[1] if len(sys.argv) > 1 else "cp", WORLD, timeout=60)
    if res.hang:
        print(res.hang.message)
    for r in res.ranks:
        print(f"rank {r.rank}:", r.error or r.value)
