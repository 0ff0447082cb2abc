"""A FAKE ``torch_npu`` for CPU-only machines: lab code takes the branches it takes on a card.

Nothing here runs on an Ascend NPU. ``install()`` makes, in this process only:

- ``npu`` a torch device (PyTorch's out-of-tree device mechanism, the PrivateUse1 backend renamed
  to ``npu`` as ``torch_npu`` itself does): ``"npu"`` / ``"npu:0"`` device strings, ``.npu()``,
  ``.is_npu``, ``tensor.to("npu:0")``, factories with ``device="npu"``. A tensor on the fake device
  is a :class:`FakeNpuTensor` (a ``torch.Tensor`` wrapper subclass whose data is a CPU tensor):
  every aten op unwraps, runs on the CPU in the same dtype and wraps the result on the same
  device. Mixing devices in one op raises as a card does ("Expected all tensors to be on the same
  device"); a 0-dim CPU tensor is allowed as a scalar, CPU indices are allowed for indexing;
  ``numpy()`` of a device tensor raises; ``.cpu()``, ``.item()``, ``.tolist()`` copy back.
- ``torch.npu`` (also ``torch_npu.npu``): ``is_available``, ``device_count``, ``current_device``,
  ``set_device``, ``get_device_name``, ``synchronize``, ``Stream``, ``Event`` (``enable_timing``
  checked by ``elapsed_time``), ``stream()``, ``current_stream``, ``default_stream``,
  ``memory_allocated`` / ``max_memory_allocated`` / ``reset_peak_memory_stats`` /
  ``memory_reserved`` / ``mem_get_info`` (bytes of live device tensors), ``manual_seed``.
- ``sys.modules["torch_npu"]``: a module whose fused ops (``npu_rms_norm`` ... the ones
  ``labkit.npu`` forwards to) check their arguments against ``torch_npu``'s signatures, require
  their tensors on one NPU, and compute with labkit's CPU references in the inputs' dtypes
  (bf16 stays bf16), charging nothing to an emulation session (the card path does not charge).

What it proves: the NPU branches run (device strings, ``.to(device)`` placement, dtypes, stream
and event API usage, the fused ops' call signatures and output structure). What only a card
proves: the numerics of the real kernels, timing (everything here is synchronous CPU work, so
``Event.elapsed_time`` is CPU wall time), memory limits and the driver. See docs/labkit.md.

Installing is explicit: ``install()`` from a test, or ``LABKIT_FAKE_NPU=N`` in the environment of
a process that imports ``labkit`` (N fake devices; ``ASCEND_RT_VISIBLE_DEVICES`` narrows them as the
runtime does). It refuses when a real ``torch_npu`` is importable, and there is no uninstall
(PyTorch cannot rename its PrivateUse1 backend twice): use a subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any

__all__ = ["ENV_VAR", "FakeNpuTensor", "install", "installed", "stats"]

ENV_VAR = "LABKIT_FAKE_NPU"
NAME_VAR = "LABKIT_FAKE_NPU_NAME"
FAKE_VERSION = "0.0.0+labkit.fake"

_state: dict[str, Any] = {"module": None}


def installed() -> bool:
    """True when this process has the fake installed."""
    return _state["module"] is not None


def _device_count(requested: int | None) -> int:
    if requested is None:
        raw = os.environ.get(ENV_VAR, "1").strip()
        requested = int(raw) if raw.isdigit() and int(raw) > 0 else 1
    from labkit.device import visible_devices

    visible = visible_devices()
    return min(requested, len(visible)) if visible is not None else requested


def install(device_count: int | None = None, name: str | None = None) -> types.ModuleType:
    """Install the fake ``torch_npu`` in this process (idempotent); returns the module.

    ``device_count`` defaults to ``LABKIT_FAKE_NPU`` (a number, else 1), narrowed by
    ``ASCEND_RT_VISIBLE_DEVICES``; ``name`` (``LABKIT_FAKE_NPU_NAME``, default ``Ascend910B2``) is
    the chip name ``get_device_name`` reports, marked as fake.
    """
    if _state["module"] is not None:
        return _state["module"]  # type: ignore[no-any-return]
    present = sys.modules.get("torch_npu")
    if present is not None or importlib.util.find_spec("torch_npu") is not None:
        raise RuntimeError(
            f"{ENV_VAR}: a real torch_npu is installed in this environment; the fake stands in for it "
            f"on CPU-only machines only (unset {ENV_VAR})"
        )
    import torch

    if torch._C._get_privateuse1_backend_name() not in ("privateuseone", "npu"):
        raise RuntimeError(
            f"the PrivateUse1 backend is already {torch._C._get_privateuse1_backend_name()!r}; "
            "cannot install the fake npu"
        )
    from . import _ops, _runtime, _tensor

    chip = name or os.environ.get(NAME_VAR) or "Ascend910B2"
    runtime = _runtime.make_runtime(_device_count(device_count), f"{chip} (fake NPU: labkit.npu_fake on CPU)")
    _tensor.register(runtime)
    module = types.ModuleType("torch_npu", "FAKE torch_npu (labkit.npu_fake): CPU stand-in, not a card")
    module.__version__ = FAKE_VERSION  # type: ignore[attr-defined]
    module.__labkit_fake__ = True  # type: ignore[attr-defined]
    module.npu = runtime  # type: ignore[attr-defined]
    module.float4_e2m1fn_x2 = getattr(torch, "float4_e2m1fn_x2", None)  # type: ignore[attr-defined]
    for op_name, fn in _ops.make_ops().items():
        setattr(module, op_name, fn)
    sys.modules["torch_npu"] = module
    sys.modules["torch_npu.npu"] = runtime
    _state["module"] = module
    return module


def stats() -> dict[str, Any]:
    """Counts of what lab code asked the fake runtime for (streams made, stream switches, events
    recorded, synchronizes, fused-op calls by name), for tests."""
    if _state["module"] is None:
        return {}
    return dict(_state["module"].npu._stats)


def __getattr__(name: str) -> Any:
    if name == "FakeNpuTensor":
        from ._tensor import FakeNpuTensor

        return FakeNpuTensor
    raise AttributeError(name)
