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
from labkit.emu.profiles import get_profile
from labkit.longcat import CLUSTER_A2, LONGCAT, TinyLongcat, TinyLongcatConfig


def qkv_case(seed: int, b: int, h: int, s: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=g) * (1.5 if i == 0 else 1.0) for i in range(3))  # type: ignore[return-value]


def _shard(t: torch.Tensor, rank: int, world: int, dim: int) -> torch.Tensor:
    return t.chunk(world, dim)[rank].contiguous()


def cp(rank: int, world: int, cases: list[dict[str, int]], model: dict[str, Any]) -> dict[str, Any]:
    attendee = importlib.import_module("cp_attention").cp_attention
    kv = {"calls": 0, "elems": 0}  # K and V elements this rank's calls were given (the traffic bound)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rank: int, world: int) -> Any:
        kv["calls"] += 1
        kv["elems"] += k.numel() + v.numel()
        return attendee(q, k, v, rank, world)

    outs = []
    for c in cases:
        q, k, v = qkv_case(c["seed"], c["b"], c["h"], c["s"], c["d"])
        outs.append(fn(*(_shard(t, rank, world, 2) for t in (q, k, v)), rank, world))
    m = TinyLongcat(TinyLongcatConfig(seed=model["seed"]))
    ids = torch.tensor(model["ids"])
    part = ids.chunk(world, 1)[rank]
    offset = rank * part.shape[1]
    logits = m.forward(part, offset=offset, attention=lambda q, k, v, off: fn(q, k, v, rank, world))
    return {"cases": outs, "logits": logits, "kv_calls": kv["calls"], "kv_elems": kv["elems"]}


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
            raise ValueError(
                f"rank {self._rank} holds experts {self.local.start}..{self.local.stop - 1}; expert {e} is {kind}"
            )
        self.rows[e] += int(rows.shape[0])
        return self._m.expert(self._layer, e, rows)


def moe_case(
    seed: int, t: int, cfg: TinyLongcatConfig, only_zero: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, cfg.d_model, generator=g)
    n = cfg.n_routed + cfg.n_zero
    if only_zero:
        ids = torch.stack(
            [torch.randperm(cfg.n_zero, generator=g)[: cfg.top_k] + cfg.n_routed for _ in range(t)]
        )
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


#: each token of the tiny model's pipeline stands for a chunk of this many tokens of a long prompt,
#: and each stage costs what one full-size LongCat 2.0 layer costs on one 910B card
CHUNK = 4096


def stage_cost(tokens: int) -> float:
    """Emulated seconds of one full-size layer on ``tokens`` chunks (labkit.emu roofline, 910B,
    graph mode): the prompt tokens' dense and 8-routed-expert FLOPs, every weight of the layer read once."""
    c = LONGCAT
    active = c.rounds * (c.attn_params + c.mlp_params) + c.top_routed * c.expert_params
    flops = 2 * tokens * CHUNK * active
    nbytes = c.dense_bytes_per_layer + c.n_routed * c.expert_params
    return op_cost(get_profile("910B"), flops=flops, bytes=nbytes, dtype="int8", graph_mode=True).total_s


def link_bytes_per_s(cfg: TinyLongcatConfig) -> float:
    """The toy activation row (d_model fp32) stands for CHUNK rows of hidden 8192 bf16 crossing
    the A2 intra-node link (HCCS 196 GB/s, UNVERIFIED)."""
    return CLUSTER_A2.intra_bw.value * (cfg.d_model * 4) / (CHUNK * LONGCAT.hidden * 2)


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
            ldist.charge(stage_cost(mb.shape[0] * mb.shape[1]), f"stage {rank}")
            return y

        y, bubble = fn(x, case["n_micro"], stage, rank, world)
        out.append({"y": y, "bubble": bubble})
    return out
