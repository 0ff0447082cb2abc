"""A deployable tiny MoE: the shipped TinyMoE with every op a *skill* may change in one place.

The agent-deploy lab optimises this model the way the Hy3 agent workflow optimises Hy3 on
Ascend (reference/talks-and-hardware.md, Lab 2): a skill swaps ops for fused ones, quantises
weights, turns on graph mode or replaces the decode loop, and the runner keeps the change only
when it verifies. What a skill may change is exactly this state:

- ``ops``: the callables of :class:`Ops` (RMSNorm, residual-add + RMSNorm, SwiGLU, MoE gating,
  the routed experts: one by one, or as grouped matmuls).
  The defaults are the *eager* decompositions, charged as the several kernels an eager
  PyTorch graph launches (RMSNorm = pow, mean, rsqrt, mul, mul: 5 launches).
- ``weights``: name -> ``torch.Tensor`` or :class:`labkit.mx.MXTensor`; a linear whose weight
  is an MXTensor runs as ``mx.mx_linear`` with ``act_fmt[group]`` activations.
- ``graph``: decode steps run inside ``session.graph()``; the first step of each shape pays a
  one-time capture + compile (:data:`GRAPH_COMPILE_LAUNCHES` eager launches), so a
  measurement without warm-up sees it.
- ``decode_fn``: the decode loop, ``decode_fn(model, prompt_ids, n) -> list[int]``; the default
  is plain greedy (:func:`greedy`), an MTP skill installs a speculative loop built on
  :meth:`DeployModel.step` and :meth:`DeployModel.draft`. The draft reads ``weights["mtp.lm_head"]``
  when a skill adds one (a cheaper copy of the LM head: a draft may be approximate, the
  verification step keeps the output exact), else the shared ``lm_head``.
- ``applied``: names of the skills applied, in order (a label, not a switch).

:meth:`DeployModel.clone` copies that state (tensors are shared: skills replace entries, they
never write into a tensor), so a runner can try a skill on a copy and drop it.

The maths equals :class:`labkit.models.TinyMoE` (tested); prefill is always eager (as the Hy3
A3 deployment keeps it) and is not charged to the emulated device: decode is what the lab measures.

The forward passes run under ``torch.inference_mode()`` (less CPU per op than ``no_grad``); what
they hand back (logits, hidden states) are ordinary tensors (copies) and the KV cache is allocated
outside it, so the caller may change any of them in place, as before.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from labkit import emu, mx
from labkit.models import KVCache, TinyMoE, load_tiny_moe
from labkit.npu import npu_rotary_mul

#: eager launch-equivalents charged once per graph shape for capture + compile (ASSUMED: the
#: Hy3 A3 run spends 91 s of warm-up on compilation against 33 ms per decode step; here a
#: compile costs 2000 eager launches, i.e. 40 ms at 20 us per launch, about 100 graph steps)
GRAPH_COMPILE_LAUNCHES = 2000

GROUPS = ("embed", "attn", "router", "expert", "shared", "norm", "lm_head", "mtp")


def group_of(name: str) -> str:
    """The placement/quantisation group of a weight name (see :data:`GROUPS`)."""
    g = _GROUP_OF.get(name)
    if g is None:
        g = _GROUP_OF[name] = _group_of(name)
    return g


_GROUP_OF: dict[str, str] = {}  # name -> group: a linear asks on every call (CPU time only)


def _group_of(name: str) -> str:
    if name.startswith("mtp."):
        return "mtp"
    if name in ("embed", "lm_head"):
        return name
    if "norm" in name:
        return "norm"
    if ".attn." in name:
        return "attn"
    if ".expert." in name:
        return "expert"
    if ".shared_" in name:
        return "shared"
    if name.endswith(".moe.gate"):
        return "router"
    raise KeyError(f"no group for weight {name!r}")


def _nb(*ts: torch.Tensor) -> float:
    return float(sum(t.numel() * t.element_size() for t in ts))


#: True inside an emulation session: the charges of an op are only worked out when someone
#: listens (outside a session ``emu.account`` does nothing), which saves CPU time, never a figure
_charging = emu.accounting_active

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


# -- eager ops: the decompositions an unfused PyTorch model launches ----------------------------
def eager_rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """pow, mean, rsqrt(+eps), mul, mul: five kernels, each reading and writing its tensors."""
    sq = x.pow(2)
    ms = sq.mean(-1, keepdim=True)
    r = torch.rsqrt(ms + eps)
    y = (x * r) * gamma
    if _charging():
        emu.account(
            "rms_norm", flops=4.0 * x.numel(), bytes=_nb(x, sq, sq, ms, ms, r, x, y, y, gamma, y), launches=5
        )
    return y


def eager_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)``: an add kernel, then the eager RMSNorm."""
    s = x + residual
    if _charging():
        emu.account("residual_add", flops=float(s.numel()), bytes=_nb(x, residual, s))
    return eager_rms_norm(s, gamma, eps), s


def eager_swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(a) then mul by b (a = first half, the gate): two kernels."""
    a, b = gate_up.chunk(2, dim=-1)
    s = F.silu(a)
    y = s * b
    if _charging():
        emu.account("swiglu", flops=5.0 * y.numel(), bytes=_nb(a, s, s, b, y), launches=2)
    return y


def eager_gating(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax, top-k, sum, div: four kernels -> (weights [N, k] summing to 1, ids [N, k] int64).

    Equal probabilities rank the lowest expert id first (stable sort), as the fused op does."""
    probs = torch.softmax(logits.float(), dim=-1)
    w, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    w, idx = w[..., :k], idx[..., :k]
    s = w.sum(-1, keepdim=True)
    w = (w / s).to(logits.dtype)
    if _charging():
        emu.account(
            "moe_gating",
            flops=6.0 * logits.numel(),
            bytes=_nb(logits, probs, probs, w, idx, w, s, w),
            launches=4,
        )
    return w, idx


def eager_experts(
    model: DeployModel, block: str, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor
) -> torch.Tensor:
    """Routed experts one by one (eager): per expert with rows, gate_up, SwiGLU, down and a
    weighted add, so the launches grow with the number of distinct experts in the batch."""
    out = torch.zeros_like(x)
    # each expert's (row, slot) pairs in row-major order, as (idx == e).nonzero() gives them: a
    # stable sort of the flattened ids keeps equal ids in flat-index order (CPU time only)
    k = idx.shape[1]
    order = torch.sort(idx.reshape(-1), stable=True)
    uniq, cnt = torch.unique_consecutive(order.values, return_counts=True)
    rows_all, cols_all = order.indices // k, order.indices % k
    w_all = w[rows_all, cols_all].unsqueeze(-1)
    start = 0
    for e, c in zip(uniq.tolist(), cnt.tolist(), strict=True):
        rows = rows_all[start : start + c]
        name = f"{block}.moe.expert.{e}"
        y = model.linear(model.ops.swiglu(model.linear(x[rows], f"{name}.gate_up")), f"{name}.down")
        y = y * w_all[start : start + c]
        if _charging():
            emu.account("expert_combine", flops=2.0 * y.numel(), bytes=3 * _nb(y))
        out.index_add_(0, rows, y)
        start += c
    return out


def _weight_nbytes(t: Any) -> int:
    return int(t.nbytes) if isinstance(t, mx.MXTensor) else t.numel() * t.element_size()


def _grouped(
    model: DeployModel,
    names: list[str],
    xs: torch.Tensor,
    counts: list[int],
    op: str,
    act_q: _SharedActQuant | None = None,
) -> torch.Tensor:
    """One grouped matmul over rows sorted by expert (``npu_grouped_matmul`` with a group list):
    one launch (two with MX activations: the dynamic quant), the active experts' weight bytes."""
    outs = []
    start = 0
    if act_q is None:  # the activation quant of all rows at once (rows are independent)
        act_q = _SharedActQuant(xs)
    for name, c in zip(names, counts, strict=True):  # uncharged: charged once below, as one kernel
        outs.append(model._linear(xs[start : start + c], name, act_q.rows(start, c), False))
        start += c
    y = torch.cat(outs, dim=0)
    if not _charging():
        return y
    first = model.weights[names[0]]
    shape = first.shape
    dtype = first.fmt.name if isinstance(first, mx.MXTensor) else _dtype_name(first.dtype)
    act = model.act_fmt.get(group_of(names[0])) if isinstance(first, mx.MXTensor) else None
    act_bytes = float(xs.numel() * xs.element_size())
    if act is not None:
        q_bytes = xs.numel() * mx.get_format(act).bits_per_element / 8
        emu.account(
            "dynamic_mx_quant", flops=4.0 * xs.numel(), bytes=act_bytes + q_bytes, fused=True, dtype=act
        )
        act_bytes = q_bytes
    emu.account(
        op,
        flops=2.0 * xs.shape[0] * shape[0] * shape[1],
        bytes=act_bytes + _nb(y) + sum(_weight_nbytes(model.weights[n]) for n in names),
        fused=True,
        dtype=dtype,
    )
    return y


class _SharedActQuant:
    """``mx.quantize_dequantize(x, fmt)`` computed once per format for every linear that reads
    ``x`` (q, k and v) or a row slice of a 2-D ``x`` (the grouped experts: MX blocks run along the
    last dim, so a row's result does not depend on the other rows). The same values and emulated
    charges as quantizing each linear's input on its own, for a fraction of the CPU time."""

    def __init__(self, x: torch.Tensor, source: tuple[_SharedActQuant, torch.Tensor] | None = None) -> None:
        self.x = x
        self.source = source  # (parent, rows) when x is parent.x[rows]: gathered from the parent's
        self.done: dict[str, tuple[torch.Tensor, int]] = {}

    def __call__(self, act: str) -> tuple[torch.Tensor, int]:
        if act not in self.done:
            if self.source is None:
                self.done[act] = mx.quantize_dequantize(self.x, act)
            else:
                parent, rows = self.source
                xq, nbytes = parent(act)
                self.done[act] = (xq[rows], nbytes // max(1, parent.x.shape[0]) * self.x.shape[0])
        return self.done[act]

    def rows(self, start: int, count: int) -> Callable[[str], tuple[torch.Tensor, int]]:
        def get(act: str) -> tuple[torch.Tensor, int]:
            xq, nbytes = self(act)
            return xq[start : start + count], nbytes // max(1, self.x.shape[0]) * count

        return get


def grouped_experts(
    model: DeployModel, block: str, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor
) -> torch.Tensor:
    """The routed experts as grouped matmuls (the ``npu_moe_init_routing`` + ``npu_grouped_matmul``
    + ``npu_moe_finalize_routing`` form the Hy3 graph stage uses): sort the (token, expert) rows
    by expert, one grouped gate_up, one SwiGLU, one grouped down, one weighted unsort-and-sum.
    Same maths as :func:`eager_experts`; a fixed number of launches however many experts."""
    k = idx.shape[1]
    flat = idx.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    rows = order // k
    experts = flat[order]
    xs = x[rows]
    if _charging():
        emu.account("moe_init_routing", flops=float(flat.numel()), bytes=_nb(xs, xs, idx), fused=True)
    uniq, cnt = torch.unique_consecutive(experts, return_counts=True)  # experts is sorted
    active, counts = uniq.tolist(), cnt.tolist()
    base = f"{block}.moe.expert"
    moe_in = model._moe_act  # the MoE input's activation quant, when x is that input: its rows
    act_q = _SharedActQuant(xs, (moe_in, rows)) if moe_in is not None and moe_in.x is x else None
    h = _grouped(model, [f"{base}.{e}.gate_up" for e in active], xs, counts, "grouped_matmul", act_q)
    h = model.ops.swiglu(h)
    y = _grouped(model, [f"{base}.{e}.down" for e in active], h, counts, "grouped_matmul")
    y = y * w.reshape(-1)[order].unsqueeze(-1)
    out = torch.zeros_like(x).index_add(0, rows, y)
    if _charging():
        emu.account("moe_finalize_routing", flops=2.0 * y.numel(), bytes=_nb(y, out, w), fused=True)
    return out


@dataclass
class Ops:
    """The op table a skill may change (signatures are the contract):

    ``rms_norm(x, gamma, eps) -> y``; ``add_rms_norm(x, residual, gamma, eps) -> (y, x + residual)``;
    ``swiglu(gate_up) -> silu(first half) * second half``; ``gating(logits, k) -> (w, ids)`` with
    ``w`` the softmax probabilities of the top-k experts renormalised to sum to 1;
    ``experts(model, block, x, w, ids) -> routed output`` (:func:`eager_experts` or
    :func:`grouped_experts`)."""

    rms_norm: Callable[..., torch.Tensor] = eager_rms_norm
    add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]] = eager_add_rms_norm
    swiglu: Callable[..., torch.Tensor] = eager_swiglu
    gating: Callable[..., tuple[torch.Tensor, torch.Tensor]] = eager_gating
    experts: Callable[..., torch.Tensor] = eager_experts

    def changed(self) -> list[str]:
        """Names of the slots that are not the eager default."""
        default = Ops()
        return [f.name for f in fields(self) if getattr(self, f.name) is not getattr(default, f.name)]


def greedy(model: DeployModel, prompt_ids: list[int], n: int) -> list[int]:
    """Plain greedy decoding: one prefill, then one decode step per new token; ``n`` new tokens."""
    # no draft reads this cache: its MTP slot is left empty (CPU time only)
    logits, _, cache = model._prefill(prompt_ids, n, mtp=False)
    out = [int(logits[-1].argmax())]
    while len(out) < n:
        logits, _ = model.step([out[-1]], cache)
        out.append(int(logits[-1].argmax()))
    return out


class DeployModel:
    """See the module docstring. ``DeployModel.load()`` gives the shipped weights."""

    _moe_act: _SharedActQuant | None = None  # the MoE input's activation quant, during _moe

    def __init__(self, base: TinyMoE):
        self.cfg = base.cfg
        c = base.cfg
        p = {k: v.detach() for k, v in base.named_parameters()}
        w: dict[str, Any] = {"embed": p["embed"], "lm_head": p["lm_head"], "norm": p["norm.weight"]}
        blocks = [f"layers.{i}" for i in range(c.n_layers)] + (["mtp.block"] if c.mtp else [])
        for b in blocks:
            for n in ("attn_norm.weight", "ffn_norm.weight", "attn.wq", "attn.wk", "attn.wv", "attn.wo"):
                w[f"{b}.{n}"] = p[f"{b}.{n}"]
            w[f"{b}.moe.gate"] = p[f"{b}.moe.gate"]
            w[f"{b}.moe.shared_gate_up"] = p[f"{b}.moe.shared_gate_up"]
            w[f"{b}.moe.shared_down"] = p[f"{b}.moe.shared_down"]
            for e in range(c.n_routed_experts):
                w[f"{b}.moe.expert.{e}.gate_up"] = p[f"{b}.moe.experts_gate_up"][e]
                w[f"{b}.moe.expert.{e}.down"] = p[f"{b}.moe.experts_down"][e]
        if c.mtp:
            for n in ("mtp.norm_h.weight", "mtp.norm_e.weight", "mtp.proj", "mtp.norm.weight"):
                w[n] = p[n]
        self.weights: dict[str, Any] = w
        self.act_fmt: dict[str, str | None] = {}
        self.ops = Ops()
        self.graph = False
        self.decode_fn: Callable[[DeployModel, list[int], int], list[int]] = greedy
        self.applied: list[str] = []
        self._compiled: set[tuple[str, int]] = set()
        self._deq: dict[int, tuple[mx.MXTensor, torch.Tensor]] = {}  # shared by clones (a CPU-time cache)
        self.rope_cos: torch.Tensor = base.rope_cos  # type: ignore[assignment]
        self.rope_sin: torch.Tensor = base.rope_sin  # type: ignore[assignment]

    @classmethod
    def load(cls) -> DeployModel:
        base, _ = load_tiny_moe()
        return cls(base)

    # -- the state a skill changes ---------------------------------------------------------------
    def clone(self) -> DeployModel:
        """A copy whose op table, weight map, formats, flags and decode loop are its own (tensors
        are shared, never written to); the graph compile cache is *not* copied (a new process)."""
        other = copy.copy(self)
        other.weights = dict(self.weights)
        other.act_fmt = dict(self.act_fmt)
        other.ops = copy.copy(self.ops)
        other.applied = list(self.applied)
        other._compiled = set()
        return other

    def names(self, group: str) -> list[str]:
        """Weight names of one group (see :func:`group_of`)."""
        return [n for n in self.weights if group_of(n) == group]

    def weight_bytes(self, group: str | None = None) -> int:
        """Bytes the weights occupy on the device (MX weights: codes + scales), one group or all."""
        total = 0
        for n, t in self.weights.items():
            if group is None or group_of(n) == group:
                total += t.nbytes if isinstance(t, mx.MXTensor) else t.numel() * t.element_size()
        return total

    def state(self) -> dict[str, Any]:
        """Plain data describing the deployment (for logs and checkers)."""
        return {
            "ops": self.ops.changed(),
            "formats": {
                g: sorted(
                    {
                        t.fmt.name
                        for n, t in self.weights.items()
                        if group_of(n) == g and isinstance(t, mx.MXTensor)
                    }
                )
                for g in GROUPS
            },
            "act_fmt": {g: f for g, f in self.act_fmt.items() if f},
            "graph": self.graph,
            "decode": getattr(self.decode_fn, "__name__", str(self.decode_fn)),
            "applied": list(self.applied),
            "weight_bytes": self.weight_bytes(),
        }

    # -- building blocks -------------------------------------------------------------------------
    def linear(
        self, x: torch.Tensor, name: str, act_q: Callable[[str], tuple[torch.Tensor, int]] | None = None
    ) -> torch.Tensor:
        """``x @ weights[name].T``, charged; ``act_q(fmt)``, when given, is ``x``'s activation
        quant (``mx.quantize_dequantize(x, fmt)``) already computed for another linear of ``x``."""
        return self._linear(x, name, act_q, _charging())

    def _linear(
        self,
        x: torch.Tensor,
        name: str,
        act_q: Callable[[str], tuple[torch.Tensor, int]] | None,
        charge: bool,
    ) -> torch.Tensor:
        """:meth:`linear`, charged only when ``charge`` (the same values either way)."""
        w = self.weights[name]
        g = group_of(name)
        if isinstance(w, mx.MXTensor):
            return self._mx_linear(x, w, self.act_fmt.get(g), act_q, charge)
        y = x @ w.t()
        if charge:
            m = x.numel() // x.shape[-1]
            n, k = w.shape
            emu.account(
                f"{g}_linear",
                flops=2.0 * m * n * k,
                bytes=float((x.numel() + y.numel()) * x.element_size() + n * k * w.element_size()),
                dtype=_dtype_name(w.dtype),
            )
        return y

    def _mx_linear(
        self,
        x: torch.Tensor,
        w: mx.MXTensor,
        act: str | None,
        act_q: Callable[[str], tuple[torch.Tensor, int]] | None = None,
        charge: bool = True,
    ) -> torch.Tensor:
        """``labkit.mx.mx_linear`` (same maths, same charges) with the dequantised weight cached:
        the weight is fixed, so decoding it again on every call only costs CPU time."""
        hit = self._deq.get(id(w))
        if hit is None or hit[0] is not w:
            self._dequantize_weights()
            hit = self._deq.get(id(w))
            if hit is None or hit[0] is not w:  # not one of this model's weights
                hit = self._deq[id(w)] = (w, mx.dequantize(w, torch.float32).t().contiguous())
        xq = x
        x_bytes = 0
        if act is not None:
            xq, x_bytes = act_q(act) if act_q is not None else mx.quantize_dequantize(x, act)
        f32 = torch.float32  # (no conversion calls when already float32: the same values)
        out = (xq if xq.dtype == f32 else xq.to(f32)) @ hit[1]
        if out.dtype != x.dtype:
            out = out.to(x.dtype)
        if charge:
            n_out, k = w.shape
            m = x.numel() // k
            act_bytes = float(x.numel() * x.element_size())
            if act is not None:
                emu.account(
                    "dynamic_mx_quant",
                    flops=4.0 * x.numel(),
                    bytes=act_bytes + x_bytes,
                    fused=True,
                    dtype=mx.get_format(act).name,
                )
                act_bytes = float(x_bytes)
            emu.account(
                "mx_matmul",
                flops=2.0 * m * n_out * k,
                bytes=act_bytes + w.nbytes + out.numel() * out.element_size(),
                fused=True,
                dtype=w.fmt.name,
            )
        return out

    def _dequantize_weights(self) -> None:
        """Fill the dequantised-weight cache for every MX weight of this model not in it yet, one
        :func:`labkit.mx.dequantize` per group of alike weights (e.g. the experts of a layer)
        stacked: elementwise, so each slice is that weight's own dequantisation (CPU time only)."""
        groups: dict[tuple[Any, ...], list[mx.MXTensor]] = {}
        for t in self.weights.values():
            if isinstance(t, mx.MXTensor):
                hit = self._deq.get(id(t))
                if hit is None or hit[0] is not t:
                    key = (
                        t.fmt,
                        t.shape,
                        t.axis,
                        t.codes.shape,
                        t.codes.dtype,
                        t.scales.shape,
                        t.scales.dtype,
                    )
                    groups.setdefault(key, []).append(t)
        for ts in groups.values():
            t0 = ts[0]
            if len(ts) == 1 or t0.axis < 0 or t0.axis >= len(t0.shape):
                for t in ts:
                    self._deq[id(t)] = (t, mx.dequantize(t, torch.float32).t().contiguous())
                continue
            stacked = mx.MXTensor(
                torch.stack([t.codes for t in ts]),
                torch.stack([t.scales for t in ts]),
                t0.fmt,
                (len(ts), *t0.shape),
                t0.axis + 1,
                torch.float32,
            )
            values = mx.dequantize(stacked, torch.float32)
            for i, t in enumerate(ts):
                self._deq[id(t)] = (t, values[i].t().contiguous())

    def _attention(
        self,
        b: str,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache,
        slot: int,
        offset: int,
    ) -> torch.Tensor:
        c = self.cfg
        bs, s, _ = x.shape
        act_q = _SharedActQuant(x)  # one activation quant for q, k and v
        q = self.linear(x, f"{b}.attn.wq", act_q).view(bs, s, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.linear(x, f"{b}.attn.wk", act_q).view(bs, s, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.linear(x, f"{b}.attn.wv", act_q).view(bs, s, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q = npu_rotary_mul(q, cos, sin, "half")
        k = npu_rotary_mul(k, cos, sin, "half")
        if offset + s > cache.max_len:
            raise ValueError(f"KV cache full: {offset + s} positions > max_len {cache.max_len}")
        cache.k[slot][:, :, offset : offset + s] = k
        cache.v[slot][:, :, offset : offset + s] = v
        kk = cache.k[slot][:, :, : offset + s]
        vv = cache.v[slot][:, :, : offset + s]
        t = kk.shape[2]
        charge = _charging()
        kv_bytes = _nb(kk, vv) if charge else 0.0
        rep = c.n_heads // c.n_kv_heads
        kk, vv = kk.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)
        scores = (q @ kk.transpose(-1, -2)) * (c.head_dim**-0.5)
        if s > 1:  # one query sees every cached position: its causal mask is empty
            qpos = torch.arange(offset, offset + s).unsqueeze(1)
            scores = scores.masked_fill(torch.arange(t).unsqueeze(0) > qpos, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ vv
        if charge:
            emu.account(
                "attention", flops=4.0 * bs * c.n_heads * s * t * c.head_dim, bytes=_nb(q, out) + kv_bytes
            )
        out = out.transpose(1, 2).reshape(bs, s, c.n_heads * c.head_dim)
        return self.linear(out, f"{b}.attn.wo")

    def _moe(self, b: str, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        logits = self.linear(flat, f"{b}.moe.gate")
        w, idx = self.ops.gating(logits, self.cfg.top_k)
        # one activation quant of the MoE input for the shared expert and the grouped experts' rows
        act_q = self._moe_act = _SharedActQuant(flat)
        try:
            out = self.ops.experts(self, b, flat, w, idx.long())
        finally:
            self._moe_act = None
        shared = self.linear(
            self.ops.swiglu(self.linear(flat, f"{b}.moe.shared_gate_up", act_q)), f"{b}.moe.shared_down"
        )
        y = out + shared
        if _charging():
            emu.account("expert_combine", flops=float(y.numel()), bytes=3 * _nb(y))
        return y.view(shape)

    def _rope(self, offset: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        if offset + s > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {offset + s} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
        return (
            self.rope_cos[offset : offset + s].view(1, 1, s, -1),
            self.rope_sin[offset : offset + s].view(1, 1, s, -1),
        )

    def _blocks(
        self, x: torch.Tensor, blocks: list[str], slots: list[int], cache: KVCache, offset: int, final: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-norm decoder blocks with the residual add deferred into ``add_rms_norm``:
        returns (final-normed hidden, hidden before the final norm)."""
        cos, sin = self._rope(offset, x.shape[1])
        eps = self.cfg.rms_eps
        resid = x
        h = self.ops.rms_norm(x, self.weights[f"{blocks[0]}.attn_norm.weight"], eps)
        pending: torch.Tensor | None = None
        for b, slot in zip(blocks, slots, strict=True):
            if pending is not None:
                h, resid = self.ops.add_rms_norm(pending, resid, self.weights[f"{b}.attn_norm.weight"], eps)
            a = self._attention(b, h, cos, sin, cache, slot, offset)
            h, resid = self.ops.add_rms_norm(a, resid, self.weights[f"{b}.ffn_norm.weight"], eps)
            pending = self._moe(b, h)
        assert pending is not None
        normed, resid = self.ops.add_rms_norm(pending, resid, self.weights[final], eps)
        return normed, resid

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        y = F.embedding(ids, self.weights["embed"])
        if _charging():
            emu.account("embedding", flops=0.0, bytes=_nb(y) * 2 + _nb(ids))
        return y

    def _forward(self, ids: list[int], cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.tensor([ids], dtype=torch.long)
        offset = cache.length
        layers = [f"layers.{i}" for i in range(self.cfg.n_layers)]
        normed, hidden = self._blocks(
            self._embed(t), layers, list(range(self.cfg.n_layers)), cache, offset, "norm"
        )
        cache.length = offset + len(ids)
        return self.linear(normed, "lm_head")[0], hidden[0]

    def _in_graph(self, kind: str, s: int) -> Any:
        if not self.graph:
            return _Null()
        if (kind, s) not in self._compiled:  # capture + compile once per shape, in or out of a session
            self._compiled.add((kind, s))
            emu.account("graph_compile", flops=0.0, bytes=0.0, launches=GRAPH_COMPILE_LAUNCHES)
        sess = emu.current()
        return sess.graph() if sess is not None else _Null()

    # -- the decode API --------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompt_ids: list[int], max_new: int = 64) -> tuple[torch.Tensor, torch.Tensor, KVCache]:
        """Eager prefill: (logits [S, V], hidden [S, D] before the final norm, cache). With an MTP
        head, its cache slot is filled for the prompt positions too (drafts attend to it)."""
        return self._prefill(prompt_ids, max_new, mtp=True)

    @torch.no_grad()
    def _prefill(
        self, prompt_ids: list[int], max_new: int, mtp: bool
    ) -> tuple[torch.Tensor, torch.Tensor, KVCache]:
        """:meth:`prefill`; ``mtp=False`` leaves the MTP slot empty (for a loop that never drafts)."""
        c = self.cfg
        n_slots = c.n_layers + (1 if c.mtp else 0)
        cache = KVCache(
            n_slots,
            1,
            c.n_kv_heads,
            min(c.max_seq_len, len(prompt_ids) + max_new + 2),
            c.head_dim,
            torch.float32,
        )
        # the lab measures decode; prefill stays eager and is not charged
        with torch.inference_mode(), _paused():
            logits, hidden = self._forward(list(prompt_ids), cache)
            if mtp and c.mtp and len(prompt_ids) > 1:
                self._mtp(hidden[:-1].unsqueeze(0), list(prompt_ids[1:]), cache, 0)
        return logits.clone(), hidden.clone(), cache

    @torch.no_grad()
    def step(self, ids: list[int], cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step over ``ids`` (1 token, or a token plus drafts) at ``cache.length``:
        (logits [len(ids), V], hidden [len(ids), D]); the cache advances by ``len(ids)``. Set
        ``cache.length`` back to drop positions that were not accepted."""
        with torch.inference_mode(), self._in_graph("decode", len(ids)):
            logits, hidden = self._forward(list(ids), cache)
            if _charging():
                emu.account("argmax", flops=float(logits.numel()), bytes=_nb(logits))
        return logits.clone(), hidden.clone()

    def _mtp(self, hidden: torch.Tensor, next_ids: list[int], cache: KVCache, offset: int) -> torch.Tensor:
        e = self._embed(torch.tensor([next_ids], dtype=torch.long))
        z = torch.cat(
            (
                self.ops.rms_norm(hidden, self.weights["mtp.norm_h.weight"], self.cfg.rms_eps),
                self.ops.rms_norm(e, self.weights["mtp.norm_e.weight"], self.cfg.rms_eps),
            ),
            dim=-1,
        )
        z = self.linear(z, "mtp.proj")
        normed, _ = self._blocks(z, ["mtp.block"], [self.cfg.n_layers], cache, offset, "mtp.norm.weight")
        # a draft may read its own (e.g. quantised) copy of the LM head: verification keeps the output exact
        return self.linear(normed, "mtp.lm_head" if "mtp.lm_head" in self.weights else "lm_head")[0]

    @torch.no_grad()
    def draft(self, hidden: torch.Tensor, next_id: int, cache: KVCache, position: int) -> int:
        """The MTP head's greedy guess for the token at ``position + 2``, from the hidden state at
        ``position`` (``[D]``, as :meth:`step` returns it) and the token at ``position + 1``."""
        if not self.cfg.mtp:
            raise RuntimeError("this model has no MTP head")
        with torch.inference_mode(), self._in_graph("mtp", 1):
            logits = self._mtp(hidden.view(1, 1, -1), [next_id], cache, position)
            if _charging():
                emu.account("argmax", flops=float(logits.numel()), bytes=_nb(logits))
            return int(logits[-1].argmax())

    @torch.no_grad()
    def generate(self, prompt_ids: list[int], n: int) -> list[int]:
        """``n`` new tokens with the installed decode loop (``decode_fn``)."""
        return list(self.decode_fn(self, list(prompt_ids), n))[:n]

    @torch.no_grad()
    def teacher_logits(self, ids: list[int]) -> torch.Tensor:
        """Logits [S, V] of one eager forward over ``ids`` (teacher forcing, no emulated cost)."""
        with torch.inference_mode(), _paused():
            c = self.cfg
            cache = KVCache(c.n_layers + 1, 1, c.n_kv_heads, len(ids), c.head_dim, torch.float32)
            logits = self._forward(list(ids), cache)[0]
        return logits.clone()


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _paused() -> Any:
    sess = emu.current()
    return sess.paused() if sess is not None else _Null()
