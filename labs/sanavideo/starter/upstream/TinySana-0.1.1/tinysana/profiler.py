"""Op-cost reporting for a profiler, when one is listening (``labkit.emu`` on the lab machines).

``instrument(model)`` adds forward hooks that charge every Linear / Conv / Embedding as one
kernel launch with its FLOPs and bytes, and the transient activation memory of each call
(inputs + output, bf16) to the emulated device. The plain-torch ops in :mod:`tinysana.layers` charge
themselves here with one launch per elementary kernel they run, which is what an eager NPU run
pays; a fused NPU op replacing them charges itself (one launch). Elementwise glue (residual adds,
modulation, SiLU) is the same before and after fusion and is not charged.

Without ``labkit`` installed everything here is a no-op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

try:
    from labkit import emu as _emu
except ImportError:  # upstream users without labkit
    _emu = None  # type: ignore[assignment]


def active() -> bool:
    return _emu is not None and _emu.accounting_active()


def nbytes(*tensors: torch.Tensor) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))


def account(op: str, *, flops: float, bytes: float, launches: int = 1) -> None:
    if active():
        _emu.account(op, flops=flops, bytes=bytes, launches=launches, fused=False)


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in _tensors(o)]
    return []


def _charge_activations(inputs: Any, output: Any) -> None:
    """Inputs and output of one call live on the device together for a moment; counted at
    2 bytes an element, as the bf16 run on the NPU stores them."""
    s = _emu.current() if _emu is not None else None
    if s is None:
        return
    n = 2 * sum(t.numel() for t in (*_tensors(inputs), *_tensors(output)))
    s.memory.alloc("activations", n)
    s.memory.free("activations", n)


def _hook(module: nn.Module, inputs: Any, output: Any) -> None:
    if not active():
        return
    (x,) = inputs[:1]
    w = module.weight
    if isinstance(module, nn.Embedding):
        flops = 0.0
    elif isinstance(module, nn.Linear):
        flops = 2.0 * (x.numel() // x.shape[-1]) * w.shape[0] * w.shape[1]
    else:  # convolutions: 2 * output elements * (Cin/groups * kernel volume)
        flops = 2.0 * output.numel() * w[0].numel()
    kind = type(module).__name__
    account(kind, flops=flops, bytes=nbytes(x, w, output))
    _charge_activations(inputs[:1], output)


def instrument(model: nn.Module) -> nn.Module:
    """Charge each Linear/Conv/Embedding call to the profiler (idempotent)."""
    for m in model.modules():
        if isinstance(m, nn.Linear | nn.Conv2d | nn.Conv3d | nn.Embedding) and not getattr(
            m, "_profiled", False
        ):
            m.register_forward_hook(_hook)
            m._profiled = True  # type: ignore[assignment]
    return model
