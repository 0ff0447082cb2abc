"""Mixture-of-experts ops: ``npu_moe_gating_top_k_softmax`` and ``npu_grouped_matmul``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._common import account, charging, dtype_name, nbytes, on_npu, torch_npu


def npu_moe_gating_top_k_softmax(
    x: torch.Tensor, finished: torch.Tensor | None = None, k: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, expert_idx, row_idx)`` for router logits ``x`` [N, E] (or [B, S, E]).

    ``y, expert_idx = topk(softmax(x, -1), k)`` (fp32 softmax, ``y`` in ``x.dtype``, indices
    int32); ``row_idx = arange(N*k).reshape(k, N).T`` (int32), the token-major row map that
    ``npu_moe_init_routing`` takes. Rows where ``finished`` is True get expert id ``E``.
    Equal probabilities are ranked lowest expert id first (deterministic).
    """
    if on_npu(x, finished):
        return torch_npu().npu_moe_gating_top_k_softmax(x, finished, k=k)  # type: ignore[no-any-return]
    if x.dim() not in (2, 3):
        raise ValueError(f"npu_moe_gating_top_k_softmax expects [N, E] or [B, S, E], got {tuple(x.shape)}")
    num_experts = x.shape[-1]
    if not 1 <= k <= min(num_experts, 1024):
        raise ValueError(f"npu_moe_gating_top_k_softmax: k={k} must be in [1, {min(num_experts, 1024)}]")
    probs = torch.softmax(x.float(), dim=-1)
    y, idx = torch.sort(probs, dim=-1, descending=True, stable=True)  # ties: lowest expert id first
    y, idx = y[..., :k], idx[..., :k]
    idx = idx.to(torch.int32)
    if finished is not None:
        idx = torch.where(
            finished.to(torch.bool).reshape(*x.shape[:-1], 1), torch.full_like(idx, num_experts), idx
        )
    n = x.numel() // num_experts
    row_idx = torch.arange(n * k, dtype=torch.int32).reshape(k, n).t().reshape(idx.shape).contiguous()
    y = y.to(x.dtype)
    if charging():
        account(
            "moe_gating_top_k_softmax",
            flops=5 * x.numel(),
            bytes=nbytes(x, y, idx, row_idx),
            dtype=dtype_name(x),
        )
    return y, idx, row_idx


def _group_sizes(group_list: Any, group_list_type: int, m: int) -> list[int]:
    values = [int(v) for v in (group_list.tolist() if isinstance(group_list, torch.Tensor) else group_list)]
    if group_list_type == 0:  # cumulative end offsets
        sizes = [b - a for a, b in zip([0, *values[:-1]], values, strict=True)]
    elif group_list_type == 1:  # per-group counts
        sizes = values
    else:
        raise ValueError(
            f"npu_grouped_matmul: group_list_type must be 0 (cumsum) or 1 (counts), got {group_list_type}"
        )
    if any(s < 0 for s in sizes) or sum(sizes) > m:
        raise ValueError(
            f"npu_grouped_matmul: group_list {values} (type {group_list_type}) does not fit {m} rows"
        )
    return sizes


def npu_grouped_matmul(
    x: Sequence[torch.Tensor],
    weight: Sequence[torch.Tensor],
    *,
    bias: Sequence[torch.Tensor] | None = None,
    scale: Any = None,
    offset: Any = None,
    antiquant_scale: Any = None,
    antiquant_offset: Any = None,
    per_token_scale: Any = None,
    group_list: Any = None,
    activation_input: Any = None,
    activation_quant_scale: Any = None,
    activation_quant_offset: Any = None,
    split_item: int = 0,
    group_type: int | None = None,
    group_list_type: int = 0,
    act_type: int = 0,
    output_dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """Grouped GEMM, ``y_i = x_i @ w_i (+ b_i)`` with ``w_i`` of shape [K, N].

    Forms the CPU reference supports (quantization arguments are NPU-only):

    - *MoE form*: ``x=[X]`` ([M, K], rows sorted by expert), ``weight=[W]`` ([E, K, N]) or
      ``weight=[W_0, ..., W_{E-1}]``, ``group_list`` (per-expert row ranges: ``group_list_type=0``
      cumulative end offsets, ``1`` counts), ``group_type=0`` (split along M). Rows past the
      last group are zero in the output.
    - *List form*: ``x=[X_0, ...]`` and ``weight=[W_0, ...]`` of the same length, no group_list.

    ``split_item`` 0/1 returns one tensor per group; 2/3 returns ``[Y]`` with the groups
    concatenated along M. The result is a list, as in torch_npu.
    """
    if on_npu(list(x), list(weight)):
        return torch_npu().npu_grouped_matmul(  # type: ignore[no-any-return]
            x, weight, bias=bias, scale=scale, offset=offset, antiquant_scale=antiquant_scale,
            antiquant_offset=antiquant_offset, per_token_scale=per_token_scale, group_list=group_list,
            activation_input=activation_input, activation_quant_scale=activation_quant_scale,
            activation_quant_offset=activation_quant_offset, split_item=split_item,
            group_type=group_type if group_type is not None else -1, group_list_type=group_list_type,
            act_type=act_type, output_dtype=output_dtype,
        )  # fmt: skip
    unsupported = {
        "scale": scale, "offset": offset, "antiquant_scale": antiquant_scale, "antiquant_offset": antiquant_offset,
        "per_token_scale": per_token_scale, "activation_input": activation_input,
        "activation_quant_scale": activation_quant_scale, "activation_quant_offset": activation_quant_offset,
    }  # fmt: skip
    given = [k for k, v in unsupported.items() if v is not None]
    if given or act_type:
        raise NotImplementedError(
            f"npu_grouped_matmul on CPU supports plain float GEMMs only (got {given or 'act_type'})"
        )
    xs, ws = list(x), list(weight)
    if len(ws) == 1 and ws[0].dim() == 3:
        ws = list(ws[0].unbind(0))
    biases: list[torch.Tensor | None]
    if bias is None:
        biases = [None] * len(ws)
    else:
        bl = list(bias)
        biases = list(bl[0].unbind(0)) if len(bl) == 1 and bl[0].dim() == 2 else list(bl)

    if group_list is not None:
        if len(xs) != 1:
            raise ValueError("npu_grouped_matmul: with group_list, pass one x tensor [M, K]")
        if group_type not in (0, None):
            raise NotImplementedError("npu_grouped_matmul on CPU splits along M only (group_type=0)")
        big = xs[0]
        sizes = _group_sizes(group_list, group_list_type, big.shape[0])
        if len(sizes) != len(ws):
            raise ValueError(f"npu_grouped_matmul: {len(sizes)} groups in group_list but {len(ws)} weights")
        xs = list(big[: sum(sizes)].split(sizes, dim=0))
        tail = big.shape[0] - sum(sizes)
    else:
        if len(xs) != len(ws):
            raise ValueError(f"npu_grouped_matmul: {len(xs)} x tensors but {len(ws)} weights")
        tail = 0
    dtype = output_dtype or xs[0].dtype
    outs: list[torch.Tensor] = []
    flops = 0
    used_weights: list[torch.Tensor] = []
    for xi, wi, bi in zip(xs, ws, biases, strict=True):
        yi = xi.float() @ wi.float()
        if bi is not None:
            yi = yi + bi.float()
        outs.append(yi.to(dtype))
        if xi.shape[0]:
            used_weights.append(wi)
        flops += 2 * xi.shape[0] * wi.shape[0] * wi.shape[1]
    if split_item in (2, 3):
        n = ws[0].shape[1] if ws else 0
        pad = [torch.zeros(tail, n, dtype=dtype)] if tail else []
        result = [torch.cat(outs + pad, dim=0)]
    elif split_item in (0, 1):
        result = outs
    else:
        raise ValueError(f"npu_grouped_matmul: split_item must be 0-3, got {split_item}")
    account(
        "grouped_matmul", flops=flops, bytes=nbytes(list(x), used_weights, result), dtype=dtype_name(xs[0])
    )
    return result
