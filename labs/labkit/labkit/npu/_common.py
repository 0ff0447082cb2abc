"""Shared plumbing for labkit.npu: NPU dispatch and emulated-device accounting."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

_emu_account: list[Callable[..., Any] | None] = []


def on_npu(*tensors: Any) -> bool:
    """True when any argument (or element of a list argument) is a tensor on an NPU."""
    if "torch_npu" not in sys.modules:  # no tensor is on an NPU before torch_npu is imported
        return False
    for t in tensors:
        if isinstance(t, list | tuple):
            if on_npu(*t):
                return True
        elif isinstance(t, torch.Tensor) and t.device.type == "npu":
            return True
    return False


def torch_npu() -> Any:
    import torch_npu  # type: ignore[import-not-found]  # only on an Ascend machine

    return torch_npu


def account(
    op: str, *, flops: float, bytes: float, launches: int = 1, fused: bool = True, dtype: str | None = None
) -> None:
    """Charge ``op`` to the emulated device through ``labkit.emu.account`` (a no-op when
    ``labkit.emu`` or its ``account`` is missing, or when no emulation session is active)."""
    if not _emu_account:
        try:
            import labkit.emu as emu
        except ImportError:  # labkit.npu also works without the emulator
            emu = None  # type: ignore[assignment]
        fn = getattr(emu, "account", None)
        _emu_account.append(fn)
    fn = _emu_account[0]
    if fn is not None:
        fn(op, flops=float(flops), bytes=float(bytes), launches=launches, fused=fused, dtype=dtype)


def charging() -> bool:
    """False only when an imported ``labkit.emu`` has no session listening (``account`` would charge
    nothing): lets an op skip working out its charges, which costs CPU time only."""
    emu = sys.modules.get("labkit.emu")
    active = getattr(emu, "accounting_active", None)
    return active is None or bool(active())


def nbytes(*tensors: Any) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, list | tuple):
            total += nbytes(*t)
        elif isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")
