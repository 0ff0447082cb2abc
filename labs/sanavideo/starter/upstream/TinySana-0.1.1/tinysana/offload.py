"""Placing pipeline stages on the (emulated) device and taking them off again.

``to_device(module, tag)`` charges the module's weights (bf16, as in the checkpoint) to the
device memory under ``tag`` with their host-to-device copy; ``to_host(tag)`` frees them. While a
profiler session is active, a stage that runs without its weights on the device raises
``StageNotOnDevice`` (``guard(model)`` installs that check on the three stages).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import profiler

STAGES = {"text_encoder": "text_encoder", "dit": "dit", "vae": "vae.decoder"}


class StageNotOnDevice(RuntimeError):
    pass


def _session() -> Any:
    return profiler._emu.current() if profiler._emu is not None else None


def weight_bytes(module: nn.Module) -> int:
    """Bytes of the module's parameters and buffers stored as bf16."""
    return sum(2 * t.numel() for t in (*module.parameters(), *module.buffers()) if t.is_floating_point())


def to_device(module: nn.Module, tag: str) -> nn.Module:
    s = _session()
    if s is not None:
        s.memory.to_device(torch.empty(weight_bytes(module), dtype=torch.uint8), tag)
    return module


def to_host(tag: str) -> None:
    s = _session()
    if s is not None:
        s.memory.free(tag)


def guard(model: nn.Module) -> nn.Module:
    """Make each stage check, when it runs, that its weights were put on the device."""
    for tag, path in STAGES.items():
        module = model.get_submodule(path)

        def check(mod: nn.Module, args: Any, tag: str = tag) -> None:
            s = _session()
            if s is not None and s.memory.holds(tag) < weight_bytes(mod):
                raise StageNotOnDevice(
                    f"the {tag} stage ran but its weights are not on the device: "
                    f"call offload.to_device(model.{STAGES[tag]}, {tag!r}) first"
                )

        if not getattr(module, "_guarded", False):
            module.register_forward_pre_hook(check)
            module._guarded = True  # type: ignore[assignment]
    return model
