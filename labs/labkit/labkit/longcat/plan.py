"""The full-size LongCat 2.0 decode step as an op list, and its emulated timeline with prefetch.

Figures (reference/talks-and-hardware.md, Lab 5, from cann-recipes-infer
``docs/models/longcat-2.0/longcat_2.0_optimization.md``): 38 ShortCut-MoE layers (two rounds of
attention + dense MLP and one MoE each), hidden 8192, 768 routed + 128 zero experts, top-12 (8
routed + 4 zero on average), expert intermediate 2048 (48 Mi params), dense MLP intermediate 12288,
MoE and MLP int8, ~2.1 TB footprint; DSA top-2048 over an absorb-mode MLA cache. Where the
reference gives no figure the value is marked ASSUMED (MLA dims of LongCat-Flash) or DERIVED.

Device time comes from ``labkit.emu.cost.op_cost`` (roofline, graph-mode launch overhead: the
decode runs in GE graph mode); the interconnect (A2: HCCS 196 GB/s inside a node of 16 cards,
50 GB/s between nodes, both UNVERIFIED in the reference) is a ``link`` engine here:
``bytes / bandwidth + latency``. Everything is deterministic.

Prefetch (``torch_npu.npu_prefetch``: next weights HBM -> L2 while a bandwidth-light op runs):
during op ``i`` the HBM is idle for ``d_i - mem_i`` seconds, so at most ``bw * (d_i - mem_i)``
bytes fit for free; more stretches the op. Prefetched bytes of a target op's weight are read from
L2 instead of HBM. :func:`timeline` applies a list of :class:`Prefetch` and reports every op's
duration, its stretch and whether its host was memory-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..emu.cost import op_cost
from ..emu.profiles import GB, Constant, get_profile

MB = 1e6

__all__ = [
    "CLUSTER_A2",
    "LONGCAT",
    "Cluster",
    "LongcatConfig",
    "Op",
    "Prefetch",
    "Timeline",
    "decode_ops",
    "op_window",
    "timeline",
]

_REF = "reference/talks-and-hardware.md Lab 5"


@dataclass(frozen=True)
class LongcatConfig:
    n_layers: int = 38
    hidden: int = 8192
    n_routed: int = 768
    n_zero: int = 128
    top_routed: int = 8  # of the top-12, 8 routed and 4 zero experts on average
    expert_params: int = 3 * 8192 * 2048  # 48 Mi: gate, up, down of intermediate 2048
    mlp_params: int = 3 * 8192 * 12288  # one dense MLP round
    rounds: int = 2  # ShortCut-MoE: two attention + MLP rounds per layer
    # MLA (absorb mode) per round: q_lora 1536, kv_lora 512 + rope 64, 64 heads of 128 (+64 rope) [ASSUMED, LongCat-Flash]
    attn_params: int = 8192 * 1536 + 1536 * 64 * 192 + 8192 * 576 + 512 * 64 * 256 + 64 * 128 * 8192
    kv_entry_bytes: int = 576 * 2  # one token's MLA cache entry per round, bf16
    index_entry_bytes: int = 128 * 2  # one token's indexer key per layer, bf16 [ASSUMED]
    index_heads: int = 64
    topk: int = 2048
    router_experts: int = 768 + 128
    total_bytes: float = 2.1e12  # ~2.1 TB footprint [V]

    @property
    def moe_bytes(self) -> int:
        """All routed experts, int8 (1.34 TiB)."""
        return self.n_layers * self.n_routed * self.expert_params

    @property
    def dense_bytes_per_layer(self) -> int:
        """Attention (bf16) and dense MLP (int8) of one layer: replicated on every decode card."""
        return self.rounds * (self.attn_params * 2 + self.mlp_params)

    @property
    def other_bytes(self) -> float:
        """Embeddings and over-embedding tables: the rest of the ~2.1 TB [DERIVED], TP-sharded."""
        return self.total_bytes - self.moe_bytes - self.n_layers * self.dense_bytes_per_layer

    @property
    def kv_bytes_per_token(self) -> int:
        """Cache of one token over the whole model: MLA entries of both rounds + indexer keys."""
        return self.n_layers * (self.rounds * self.kv_entry_bytes + self.index_entry_bytes)


LONGCAT = LongcatConfig()


@dataclass(frozen=True)
class Cluster:
    profile: str = "910B"
    cards_per_node: int = 16
    intra_bw: Constant = Constant(196 * GB, "B/s", "910B2 intra-node, " + _REF + " §0.5", "UNVERIFIED")
    inter_bw: Constant = Constant(50 * GB, "B/s", "910B2 inter-node, " + _REF + " §0.5", "UNVERIFIED")
    link_latency: Constant = Constant(10e-6, "s", "per collective call", "ASSUMED")
    l2_bytes: int = 192 * 2**20  # per die (§0.5)
    #: HBM kept free for activations, workspace and the runtime [ASSUMED]
    reserve_bytes: int = 4 * 2**30

    @property
    def hbm_bytes(self) -> float:
        return get_profile(self.profile).hbm_capacity.value

    @property
    def hbm_bw(self) -> float:
        return get_profile(self.profile).hbm_bandwidth.value


CLUSTER_A2 = Cluster()


@dataclass(frozen=True)
class Op:
    """One op of a decode step on the busiest card. ``engine`` is ``device`` or ``link``;
    ``weight_bytes`` is the part of ``bytes`` that is weights (what a prefetch can bring in)."""

    name: str
    layer: int
    flops: float
    bytes: float
    weight_bytes: float = 0.0
    engine: str = "device"
    dtype: str = "bf16"
    remote: float = 0.0  # link ops: share of the bytes that leave the node


def decode_ops(
    dp: int,
    ep: int,
    batch: int,
    context: int,
    tp: int = 1,
    cfg: LongcatConfig = LONGCAT,
    cluster: Cluster = CLUSTER_A2,
) -> list[Op]:
    """Ops of one decode step (one token for each of ``batch`` sequences of ``context`` tokens)
    on the busiest card: DP attention over ``dp`` groups of ``tp`` cards (``ceil(batch / dp)``
    tokens per group, attention and dense MLP weights split over the ``tp`` cards of a group, the
    KV of every sequence spread over the ``dp`` groups: "KV parallel"), experts split over ``ep``
    cards. With ``tp > 1`` the attention and MLP outputs are all-reduced inside the group (one
    intra-node link op each)."""
    b = math.ceil(batch / dp)
    h = cfg.hidden
    kv_share = batch / dp  # sequences' worth of cache entries each card reads (KV parallel)
    picks = batch * cfg.top_routed
    local = cfg.n_routed / ep
    active = local * (
        1 - (1 - 1 / cfg.n_routed) ** picks
    )  # expected distinct local experts hit (uniform routing)
    tokens_here = picks / ep
    act = 2 * b * h * 2
    ops: list[Op] = []
    remote_frac = max(0.0, 1 - cluster.cards_per_node / ep)
    for layer in range(cfg.n_layers):
        for r in range(cfg.rounds):
            aw = cfg.attn_params * 2 / tp
            ops.append(Op(f"rms_norm.{r}a", layer, 4 * b * h, act))
            ops.append(Op(f"attn_proj.{r}", layer, 2 * b * cfg.attn_params / tp, aw + act, aw))
            if r == 0:  # the lightning indexer reads every cached key; its top-k is shared by both rounds
                idx = kv_share * context * cfg.index_entry_bytes
                ops.append(Op("indexer", layer, 2 * kv_share * context * cfg.index_heads * 128, idx))
            kv = kv_share * cfg.topk * cfg.kv_entry_bytes
            ops.append(Op(f"sparse_attn.{r}", layer, 4 * kv_share * cfg.topk * 64 * 576, kv + act))
            # partial attention outputs (64 heads x kv_lora 512, bf16) of the other ranks of the
            # KV-parallel group (the cards of one node hold a sequence's cache)
            kvp = min(dp, cluster.cards_per_node)
            ops.append(Op(f"kv_gather.{r}", layer, 0, b * 64 * 512 * 2 * (kvp - 1), engine="link"))
            if tp > 1:
                ops.append(Op(f"tp_allreduce.{r}a", layer, 0, 2 * (tp - 1) / tp * act, engine="link"))
            ops.append(Op(f"rms_norm.{r}m", layer, 4 * b * h, act))
            mw = cfg.mlp_params / tp
            ops.append(Op(f"mlp.{r}", layer, 2 * b * mw, mw + act, mw, dtype="int8"))
            if tp > 1:
                ops.append(Op(f"tp_allreduce.{r}m", layer, 0, 2 * (tp - 1) / tp * act, engine="link"))
        gw = cfg.router_experts * h * 2
        ops.append(Op("router", layer, 2 * b * h * cfg.router_experts, gw + act, gw))
        tok_bytes = b * cfg.top_routed * h * 2
        ops.append(Op("dispatch", layer, 0, tok_bytes if ep > 1 else 0, engine="link", remote=remote_frac))
        ew = active * cfg.expert_params
        ops.append(
            Op(
                "experts",
                layer,
                2 * tokens_here * cfg.expert_params,
                ew + 2 * tokens_here * h * 2,
                ew,
                dtype="int8",
            )
        )
        ops.append(Op("combine", layer, 0, tok_bytes if ep > 1 else 0, engine="link", remote=remote_frac))
    return ops


def _link_time(op: Op, cluster: Cluster) -> float:
    if op.bytes <= 0:
        return 0.0
    remote = op.remote
    t = max(op.bytes * (1 - remote) / cluster.intra_bw.value, op.bytes * remote / cluster.inter_bw.value)
    return t + cluster.link_latency.value


def op_window(op: Op, cluster: Cluster = CLUSTER_A2) -> tuple[float, float, str]:
    """``(duration_s, hbm_busy_s, bound)`` of ``op`` alone; ``bound`` as ``labkit.emu`` says
    (``compute`` / ``memory`` / ``launch``, or ``link`` for a transfer)."""
    if op.engine == "link":
        return _link_time(op, cluster), 0.0, "link"
    c = op_cost(get_profile(cluster.profile), flops=op.flops, bytes=op.bytes, dtype=op.dtype, graph_mode=True)
    return c.total_s, c.memory_s, c.bound


@dataclass(frozen=True)
class Prefetch:
    """Bring ``bytes`` of op ``target``'s weights into L2 while op ``host`` runs (indices)."""

    host: int
    target: int
    bytes: float


@dataclass
class Timeline:
    tpot_s: float
    durations: list[float]
    stretch: list[float]  # seconds each op got longer because of the prefetches it hosts
    memory_bound_hosts: list[int]  # hosts whose own op is memory-bound (the talk: do not overlap these)
    errors: list[str] = field(default_factory=list)

    @property
    def tpot_ms(self) -> float:
        return self.tpot_s * 1e3


def timeline(
    ops: list[Op], prefetches: list[Prefetch] | tuple[Prefetch, ...] = (), cluster: Cluster = CLUSTER_A2
) -> Timeline:
    """Emulated decode step with ``prefetches`` (see the module docstring). Invalid prefetches
    (target not after its host, more than the target's weights, more in flight than L2) are
    listed in ``errors`` and ignored."""
    bw = cluster.hbm_bw
    hosted = [0.0] * len(ops)
    fetched = [0.0] * len(ops)
    errors: list[str] = []
    for p in prefetches:
        if not (0 <= p.host < p.target < len(ops)) or p.bytes < 0:
            errors.append(f"prefetch {p}: host must come before target")
            continue
        if fetched[p.target] + p.bytes > ops[p.target].weight_bytes * (1 + 1e-9):
            errors.append(
                f"prefetch {p}: more than op {p.target}'s {ops[p.target].weight_bytes:.0f} weight bytes"
            )
            continue
        hosted[p.host] += p.bytes
        fetched[p.target] += p.bytes
    # L2 holds what is fetched and not yet consumed: bytes of a prefetch from its host to its target
    held = [0.0] * (len(ops) + 1)
    for p in prefetches:
        if 0 <= p.host < p.target < len(ops):
            held[p.host] += p.bytes
            held[p.target] -= p.bytes
    level = 0.0
    for i in range(len(ops)):
        level += held[i]
        if level > cluster.l2_bytes * (1 + 1e-9):
            errors.append(
                f"op {i}: {level / 2**20:.1f} MiB in flight exceeds L2 ({cluster.l2_bytes / 2**20:.0f} MiB)"
            )
            break
    durations, stretch, mem_hosts = [], [], []
    for i, op in enumerate(ops):
        base, mem, bound = op_window(op, cluster)
        if op.engine == "link":
            d = max(base, hosted[i] / bw)
        else:
            c = op_cost(
                get_profile(cluster.profile),
                flops=op.flops,
                bytes=max(0.0, op.bytes - fetched[i]),
                dtype=op.dtype,
                graph_mode=True,
            )
            d = max(c.total_s, c.memory_s + hosted[i] / bw)
            base = c.total_s
        stretch.append(max(0.0, d - base))
        durations.append(d)
        if hosted[i] > 0 and bound == "memory":
            mem_hosts.append(i)
    return Timeline(sum(durations), durations, stretch, mem_hosts, errors)
