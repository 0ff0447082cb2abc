"""Trusted harness run on every rank by ``labkit.dist.run_ranks`` (never in the checker).

It builds the checker's inputs from seeds inside the rank, calls the attendee's function from the
lab folder, and returns plain data. Whatever a rank returns is judged by the checker against its
own single-process references, on inputs the attendee has not seen.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from labkit import dist as ldist
from labkit.emu.cost import op_cost
from labkit.emu.profiles import DEFAULT_SCALE, get_profile
from labkit.longcat import TinyLongcat, TinyLongcatConfig


def qkv_case(seed: int, b: int, h: int, s: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=g) * (1.5 if i == 0 else 1.0) for i in range(3))  # type: ignore[return-value]


def _shard(t: torch.Tensor, rank: int, world: int, dim: int) -> torch.Tensor:
    return t.chunk(world, dim)[rank].contiguous()


def cp(rank: int, world: int, cases: list[dict[str, int]], model: dict[str, Any]) -> dict[str, Any]:
    fn = importlib.import_module("cp_attention").cp_attention
    outs = []
    for c in cases:
        q, k, v = qkv_case(c["seed"], c["b"], c["h"], c["s"], c["d"])
        outs.append(fn(*(_shard(t, rank, world, 2) for t in (q, k, v)), rank, world))
    m = TinyLongcat(TinyLongcatConfig(seed=model["seed"]))
    ids = torch.tensor(model["ids"])
    part = ids.chunk(world, 1)[rank]
    offset = rank * part.shape[1]
    logits = m.forward(part, offset=offset, attention=lambda q, k, v, off: fn(q, k, v, rank, world))
    return {"cases": outs, "logits": logits}


class Experts:
    """This rank's routed experts of one layer; counts the rows each computes."""

    def __init__(self, model: TinyLongcat, layer: int, rank: int, world: int) -> None:
        c = model.cfg
        self.n_routed, self.n_zero = c.n_routed, c.n_zero
        self.per_rank = c.n_routed // world
        self.local = range(rank * self.per_rank, (rank + 1) * self.per_rank)
        self._m, self._layer, self._rank = model, layer, rank
        self.rows = [0] * c.n_routed

    def __call__(self, e: int, rows: torch.Tensor) -> torch.Tensor:
        e = int(e)
        if e not in self.local:
            kind = "a zero expert (no weights)" if e >= self.n_routed else f"on rank {e // self.per_rank}"
            raise ValueError(f"rank {self._rank} holds experts {self.local.start}..{self.local.stop - 1}; expert {e} is {kind}")
        self.rows[e] += int(rows.shape[0])
        return self._m.expert(self._layer, e, rows)


def moe_case(seed: int, t: int, cfg: TinyLongcatConfig, only_zero: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, cfg.d_model, generator=g)
    n = cfg.n_routed + cfg.n_zero
    if only_zero:
        ids = torch.stack([torch.randperm(cfg.n_zero, generator=g)[: cfg.top_k] + cfg.n_routed for _ in range(t)])
    else:
        ids = torch.stack([torch.randperm(n, generator=g)[: cfg.top_k] for _ in range(t)])
    w = torch.rand(t, cfg.top_k, generator=g) + 0.1
    return x, ids, w / w.sum(-1, keepdim=True)


def ep(rank: int, world: int, cases: list[dict[str, Any]], model: dict[str, Any]) -> dict[str, Any]:
    fn = importlib.import_module("ep_moe").ep_moe
    m = TinyLongcat(TinyLongcatConfig(seed=model["seed"]))
    # DP attention + EP MoE: this rank's own prompts through the whole model (first, so that a
    # rank skipping a collective in the last case below returns instead of pairing with the next)
    ids = torch.tensor(model["ids"][rank])
    layer_experts: dict[int, Experts] = {}

    def moe(layer: int, x: torch.Tensor, eids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ex = layer_experts.setdefault(layer, Experts(m, layer, rank, world))
        return fn(x, eids, w, ex, rank, world)

    logits = m.forward(ids, moe=moe)
    outs, rows = [], []
    for c in cases:
        x, ids, w = moe_case(c["seed"] + 7919 * rank, c["t"], m.cfg, rank in c["only_zero"])
        ex = Experts(m, c["layer"], rank, world)
        outs.append(fn(x, ids, w, ex, rank, world))
        rows.append(ex.rows)
    return {"cases": outs, "rows": rows, "logits": logits}


def stage_cost(m: TinyLongcat, tokens: int) -> float:
    """Emulated seconds of one layer on ``tokens`` tokens (labkit.emu roofline, 910B, toy scale)."""
    c = m.cfg
    params = sum(t.numel() for k, t in m.w.items() if k.startswith("layers.0.")) - c.n_routed * 3 * c.expert_hidden * c.d_model
    params += c.top_k * 3 * c.expert_hidden * c.d_model  # only the picked experts work on a token
    flops = 2 * params * tokens
    nbytes = 4 * sum(t.numel() for k, t in m.w.items() if k.startswith("layers.0.")) + 2 * 4 * tokens * c.d_model
    return op_cost(get_profile("910B"), flops=flops, bytes=nbytes, dtype="fp32", scale=DEFAULT_SCALE).total_s


def pp(rank: int, world: int, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import torch.distributed as dist

    fn = importlib.import_module("pipeline").pipeline_prefill
    out = []
    for case in cases:
        dist.barrier()  # the cases are independent: every rank starts each one at emulated time 0
        ldist.reset_clock()
        m = TinyLongcat(TinyLongcatConfig(seed=case["seed"], n_layers=world))
        ids = torch.tensor(case["ids"])
        x = m.embed(ids) if rank == 0 else torch.full((*ids.shape, m.cfg.d_model), float("nan"))
        positions = torch.arange(ids.shape[1])

        def stage(mb: torch.Tensor, m: TinyLongcat = m, positions: torch.Tensor = positions) -> torch.Tensor:
            y = m.layer(rank, mb, positions)
            ldist.charge(stage_cost(m, mb.shape[0] * mb.shape[1]), f"stage {rank}")
            return y

        y, bubble = fn(x, case["n_micro"], stage, rank, world)
        out.append({"y": y, "bubble": bubble})
    return out
