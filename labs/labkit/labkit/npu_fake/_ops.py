"""The fake ``torch_npu`` fused ops: ``torch_npu``'s signatures, labkit's CPU references inside.

Each op binds its arguments to the signature ``labkit.npu`` documents for ``torch_npu`` (a wrong
keyword or a missing argument raises ``TypeError`` as the real op does), requires its tensors on
one NPU device (as a card does; 0-dim CPU tensors are scalars), runs the labkit CPU reference on
the unwrapped data in the inputs' dtypes, and returns its outputs (tensor, tuple or list) on that
device. Nothing is charged to an emulation session: on a card ``labkit.npu`` forwards to
``torch_npu`` without charging, and the fake must not add what the card does not.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ._tensor import FakeNpuTensor, unwrap


def _references() -> dict[str, Callable[..., Any]]:
    """The CPU references, taken from their defining modules at install time (a checker that
    later wraps ``labkit.npu.X`` to count calls does not see the fake's own calls)."""
    from labkit.npu import attention, moe, norm, quant, rope

    return {
        "npu_rms_norm": norm.npu_rms_norm,
        "npu_add_rms_norm": norm.npu_add_rms_norm,
        "npu_swiglu": norm.npu_swiglu,
        "npu_rotary_mul": rope.npu_rotary_mul,
        "npu_moe_gating_top_k_softmax": moe.npu_moe_gating_top_k_softmax,
        "npu_grouped_matmul": moe.npu_grouped_matmul,
        "npu_fusion_attention": attention.npu_fusion_attention,
        "npu_fused_infer_attention_score": attention.npu_fused_infer_attention_score,
        "npu_dynamic_mx_quant": quant.npu_dynamic_mx_quant,
        "npu_quant_matmul": quant.npu_quant_matmul,
    }


def _not_charged() -> Any:
    from labkit import emu

    s = emu.current()
    return s.paused() if s is not None else nullcontext()


def _fake_op(name: str, ref: Callable[..., Any], calls: dict[str, int]) -> Callable[..., Any]:
    sig = inspect.signature(ref)

    @functools.wraps(ref)
    def op(*args: Any, **kwargs: Any) -> Any:
        sig.bind(*args, **kwargs)  # TypeError on a call torch_npu would refuse
        flat, _ = tree_flatten((args, kwargs))
        devices = {t.device for t in flat if isinstance(t, FakeNpuTensor)}
        cpu = [
            t
            for t in flat
            if isinstance(t, torch.Tensor) and not isinstance(t, FakeNpuTensor) and t.dim() > 0
        ]
        if not devices:
            raise RuntimeError(
                f"torch_npu.{name}: expected its tensors on an NPU, got CPU tensors (fake NPU)"
            )
        if len(devices) > 1 or cpu:
            found = sorted(str(d) for d in devices) + (["cpu"] if cpu else [])
            raise RuntimeError(
                f"torch_npu.{name}: Expected all tensors to be on the same device, but found at least "
                f"two devices, {found[0]} and {found[1]}! (fake NPU)"
            )
        (device,) = devices
        calls[name] = calls.get(name, 0) + 1
        with _not_charged():
            out = ref(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        return tree_map(lambda t: FakeNpuTensor(t, device) if isinstance(t, torch.Tensor) else t, out)

    op.__qualname__ = op.__name__ = name
    return op


def make_ops() -> dict[str, Callable[..., Any]]:
    from ._tensor import _RT  # the runtime: its stats hold the call counts

    stats = _RT[0]._stats
    calls: dict[str, int] = stats.setdefault("fused_ops", {})
    return {name: _fake_op(name, ref, calls) for name, ref in _references().items()}
