"""Fused attention: ``npu_fusion_attention`` and ``npu_fused_infer_attention_score``.

The CPU reference is plain softmax attention in fp32 (scores are materialized, which the NPU
kernels avoid); the emulated-device charge is that of a flash kernel: the FLOPs of the unmasked
(query, key) pairs and the bytes of q, k, v and the output only.

Masks: a boolean ``atten_mask`` where **True means masked out** (uint8 1 likewise), shaped
[Sq, Skv], [B, 1, Sq, Skv] or [B, N, Sq, Skv]. ``sparse_mode`` 0 and 1 use the mask as given
(None = no mask) plus the ``pre/next`` token band; 2 is a causal mask aligned to the top-left
(key j > query i is masked), 3 aligned to the bottom-right (key j > i + Skv - Sq; the usual
prefill-with-cache causal mask), 4 is the band only. In modes 2 and 3 the kernel builds the
mask itself; the (2048 x 2048) template passed as ``atten_mask`` is not read here.
A row with every key masked gives zeros.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import account, dtype_name, nbytes, on_npu, torch_npu

MAX_TOKENS = 2147483647


def _to_bnsd(t: torch.Tensor, layout: str, heads: int | None, head_dim: int | None) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        b, s, h = t.shape
        d = head_dim if head_dim is not None else h // int(heads or 1)
        return t.reshape(b, s, h // d, d).transpose(1, 2)
    if layout == "SBH":
        s, b, h = t.shape
        d = head_dim if head_dim is not None else h // int(heads or 1)
        return t.reshape(s, b, h // d, d).permute(1, 2, 0, 3)
    raise NotImplementedError(f"input_layout {layout!r}: the CPU reference supports BSH, SBH, BSND and BNSD")


def _from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    b, n, s, d = t.shape
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.transpose(1, 2).reshape(b, s, n * d)
    return t.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def _masked(
    sq: int,
    skv: int,
    atten_mask: torch.Tensor | None,
    sparse_mode: int,
    pre_tokens: int,
    next_tokens: int,
) -> torch.Tensor | None:
    """A boolean mask broadcastable to [B, N, Sq, Skv], True = masked, or None."""
    i = torch.arange(sq).unsqueeze(1)
    j = torch.arange(skv).unsqueeze(0)
    mask: torch.Tensor | None = None
    if sparse_mode in (0, 1):
        if atten_mask is not None:
            mask = atten_mask.to(torch.bool)
            if mask.dim() == 2:
                mask = mask[:sq, :skv]
        if pre_tokens < MAX_TOKENS or next_tokens < MAX_TOKENS:
            band = (j < i - pre_tokens) | (j > i + next_tokens)
            mask = band if mask is None else (mask | band)
    elif sparse_mode == 2:
        mask = j > i
    elif sparse_mode == 3:
        mask = j > i + (skv - sq)
    elif sparse_mode == 4:
        offset = skv - sq
        mask = (j < i + offset - pre_tokens) | (j > i + offset + next_tokens)
    else:
        raise NotImplementedError(f"sparse_mode={sparse_mode}: the CPU reference supports 0-4")
    return mask


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """q [B,N,Sq,D], k/v [B,Nk,Skv,D] (GQA: N % Nk == 0). Returns out (fp32), row max, row sum
    of exp (both [B,N,Sq]) and the number of unmasked (query, key) pairs over all heads."""
    b, n, sq, _ = q.shape
    nk = k.shape[1]
    if n % nk:
        raise ValueError(f"{n} query heads cannot share {nk} key/value heads")
    if nk != n:
        k = k.repeat_interleave(n // nk, dim=1)
        v = v.repeat_interleave(n // nk, dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    row_max = scores.amax(-1, keepdim=True)
    safe_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    p = torch.exp(scores - safe_max)
    row_sum = p.sum(-1, keepdim=True)
    out = (p / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))) @ v.float()
    skv = k.shape[2]
    pairs = b * n * sq * skv if mask is None else int((~mask).expand(b, n, sq, skv).sum())
    return out, row_max.squeeze(-1), row_sum.squeeze(-1), pairs


def _charge(
    op: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, pairs: int
) -> None:
    d = q.shape[-1]
    account(op, flops=4 * pairs * d, bytes=nbytes(q, k, v, out), dtype=dtype_name(q))


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = MAX_TOKENS,
    next_tockens: int = MAX_TOKENS,
    inner_precise: int = 0,
    prefix: Any = None,
    actual_seq_qlen: Any = None,
    actual_seq_kvlen: Any = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:
    """Training-style FlashAttention: ``softmax(q k^T * scale, masked) v``.

    Returns torch_npu's 7-tuple ``(attention_out, softmax_max, softmax_sum, softmax_out, seed,
    offset, numels)``: ``softmax_max`` / ``softmax_sum`` are fp32 [B, N, Sq, 8] (the row max of
    the scaled scores and the row sum of ``exp(s - max)``, repeated 8 times as the kernel stores
    them), ``softmax_out`` is empty, and seed/offset/numels are 0 (no dropout).
    """
    if on_npu(query, key, value):
        return torch_npu().npu_fusion_attention(  # type: ignore[no-any-return]
            query, key, value, head_num, input_layout, pse=pse, padding_mask=padding_mask,
            atten_mask=atten_mask, scale=scale, keep_prob=keep_prob, pre_tockens=pre_tockens,
            next_tockens=next_tockens, inner_precise=inner_precise, prefix=prefix,
            actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen, sparse_mode=sparse_mode,
            gen_mask_parallel=gen_mask_parallel, sync=sync,
        )  # fmt: skip
    if pse is not None or padding_mask is not None or prefix is not None or actual_seq_qlen is not None:
        raise NotImplementedError(
            "npu_fusion_attention on CPU: pse, padding_mask, prefix, TND lengths are NPU-only"
        )
    if keep_prob != 1.0:
        raise NotImplementedError("npu_fusion_attention on CPU: dropout (keep_prob < 1) is NPU-only")
    head_dim = query.shape[-1] // head_num if input_layout in ("BSH", "SBH") else None
    q = _to_bnsd(query, input_layout, head_num, head_dim)
    k = _to_bnsd(key, input_layout, None, q.shape[-1])
    v = _to_bnsd(value, input_layout, None, q.shape[-1])
    mask = _masked(q.shape[2], k.shape[2], atten_mask, sparse_mode, pre_tockens, next_tockens)
    out, row_max, row_sum, pairs = _attend(q, k, v, mask, scale)
    attention_out = _from_bnsd(out.to(query.dtype), input_layout)
    _charge("fusion_attention", query, key, value, attention_out, pairs)
    softmax_max = row_max.unsqueeze(-1).expand(*row_max.shape, 8).contiguous()
    softmax_sum = row_sum.unsqueeze(-1).expand(*row_sum.shape, 8).contiguous()
    return attention_out, softmax_max, softmax_sum, torch.empty(0, dtype=query.dtype), 0, 0, 0


_INFER_NPU_ONLY = (
    "pse_shift",
    "dequant_scale1",
    "quant_scale1",
    "dequant_scale2",
    "quant_scale2",
    "quant_offset2",
    "antiquant_scale",
    "antiquant_offset",
    "block_table",
    "query_padding_size",
    "kv_padding_size",
    "key_antiquant_scale",
    "key_antiquant_offset",
    "value_antiquant_scale",
    "value_antiquant_offset",
    "key_shared_prefix",
    "value_shared_prefix",
    "actual_shared_prefix_len",
    "query_rope",
    "key_rope",
    "key_rope_antiquant_scale",
)


def npu_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: Any = None,
    actual_seq_lengths_kv: Any = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = MAX_TOKENS,
    next_tokens: int = MAX_TOKENS,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
    **npu_only: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference FlashAttention (prefill when Sq > 1, decode when Sq == 1).

    Returns ``(attention_out, softmax_lse)``; ``softmax_lse`` is the fp32 log-sum-exp of the
    scaled scores [B, N, Sq, 1] when ``softmax_lse_flag`` else an empty tensor.
    ``num_key_value_heads`` (0 = ``num_heads``) gives GQA; ``actual_seq_lengths_kv`` (one per
    batch) masks the keys past each sequence's length, e.g. a partly filled KV cache.
    """
    if on_npu(query, key, value):
        return torch_npu().npu_fused_infer_attention_score(  # type: ignore[no-any-return]
            query, key, value, atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths,
            actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads, scale=scale,
            pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
            num_key_value_heads=num_key_value_heads, sparse_mode=sparse_mode, inner_precise=inner_precise,
            block_size=block_size, antiquant_mode=antiquant_mode, softmax_lse_flag=softmax_lse_flag, **npu_only,
        )  # fmt: skip
    unknown = sorted(set(npu_only) - set(_INFER_NPU_ONLY))
    if unknown:
        raise TypeError(f"npu_fused_infer_attention_score got unexpected arguments {unknown}")
    given = sorted(k for k, v in npu_only.items() if v is not None)
    if given or actual_seq_lengths is not None:
        raise NotImplementedError(
            f"npu_fused_infer_attention_score on CPU: {given or 'actual_seq_lengths'} NPU-only"
        )
    nkv = num_key_value_heads or num_heads
    if input_layout in ("BSH", "SBH"):
        head_dim = query.shape[-1] // num_heads
        if key.shape[-1] != nkv * head_dim:
            raise ValueError(
                f"key hidden size {key.shape[-1]} != num_key_value_heads ({nkv}) x head dim ({head_dim})"
            )
    q = _to_bnsd(query, input_layout, num_heads, None)
    k = _to_bnsd(key, input_layout, nkv, q.shape[-1])
    v = _to_bnsd(value, input_layout, nkv, q.shape[-1])
    b, _, sq, _ = q.shape
    skv = k.shape[2]
    mask = _masked(sq, skv, atten_mask, sparse_mode, pre_tokens, next_tokens)
    if actual_seq_lengths_kv is not None:
        lengths = torch.as_tensor(
            actual_seq_lengths_kv.tolist()
            if isinstance(actual_seq_lengths_kv, torch.Tensor)
            else actual_seq_lengths_kv
        )
        beyond = (torch.arange(skv).view(1, 1, 1, skv) >= lengths.view(b, 1, 1, 1)).expand(b, 1, sq, skv)
        mask = beyond if mask is None else (mask | beyond)
    out, row_max, row_sum, pairs = _attend(q, k, v, mask, scale)
    attention_out = _from_bnsd(out.to(query.dtype), input_layout)
    _charge("fused_infer_attention_score", query, key, value, attention_out, pairs)
    if softmax_lse_flag:
        lse = (row_max + torch.log(row_sum)).unsqueeze(-1)
    else:
        lse = torch.empty(0, dtype=torch.float32)
    return attention_out, lse
