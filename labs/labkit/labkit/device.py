"""Which device a lab runs on: a real Ascend NPU through ``torch_npu``, or CPU emulation.

``get_device()`` picks, in order:

1. ``LABKIT_DEVICE``: ``cpu`` (or ``cpu-emu``) forces emulation; ``npu`` / ``npu:N`` requires an
   NPU and raises :class:`DeviceUnavailable` with the reason when there is none; ``auto`` or unset
   chooses automatically;
2. a real NPU when ``import torch_npu`` works and ``torch_npu.npu.is_available()``; the ordinal is
   ``N`` from ``LABKIT_DEVICE=npu:N``, else ``LOCAL_RANK``, else 0. Ordinals are *logical*:
   with ``ASCEND_RT_VISIBLE_DEVICES=4,5`` the process sees ``npu:0`` (physical 4) and ``npu:1``
   (physical 5); ``describe()`` reports both;
3. otherwise CPU emulation (``kind == "cpu-emu"``, ``torch_device == "cpu"``).

The hardware profile (for ``labkit.emu``) is ``LABKIT_PROFILE`` when set, else guessed from the
NPU's name, else ``910B``.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_PROFILE", "DeviceInfo", "DeviceUnavailable", "describe", "get_device", "visible_devices"]

DEFAULT_PROFILE = "910B"


class DeviceUnavailable(RuntimeError):
    """``LABKIT_DEVICE`` asks for an NPU that this process cannot use."""


@dataclass(frozen=True)
class DeviceInfo:
    """The device chosen for this process.

    ``torch_device`` is a string (``"npu:0"`` or ``"cpu"``) that ``tensor.to(...)`` and
    ``torch.device(...)`` accept once ``torch_npu`` is imported.
    """

    kind: str  # "npu" | "cpu-emu"
    torch_device: str
    name: str
    profile: str
    index: int | None = None
    physical_id: int | None = None
    reason: str = ""

    @property
    def is_npu(self) -> bool:
        return self.kind == "npu"


def visible_devices(value: str | None = None) -> list[int] | None:
    """Parse ``ASCEND_RT_VISIBLE_DEVICES`` as the runtime does: comma-separated ids, parsing stops
    at the first invalid entry. ``None`` when the variable is unset (all devices visible)."""
    text = os.environ.get("ASCEND_RT_VISIBLE_DEVICES") if value is None else value
    if text is None:
        return None
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            break
        ids.append(int(part))
    return ids


_import_failure: list[str] = []  # a failed import is not cached by Python; remember it here


def _torch_npu() -> tuple[Any | None, str]:
    if sys.modules.get("torch_npu") is not None:
        return sys.modules["torch_npu"], ""
    if _import_failure and "torch_npu" not in sys.modules:
        return None, _import_failure[0]
    try:
        module = importlib.import_module("torch_npu")
    except Exception as exc:  # ImportError, or a broken CANN install raising anything
        reason = f"torch_npu is not importable ({type(exc).__name__}: {exc})"
        if "torch_npu" not in sys.modules:
            _import_failure[:] = [reason]
        return None, reason
    return module, ""


def _npu_api(torch_npu: Any) -> Any:
    api = getattr(torch_npu, "npu", None)
    if api is None:
        import torch

        api = getattr(torch, "npu", None)
    return api


def guess_profile(name: str) -> str:
    """The labkit.emu profile closest to an NPU name such as ``Ascend910B2`` or ``Ascend910_9382``."""
    n = name.upper().replace(" ", "")
    if "950" in n:
        return "950DT" if "DT" in n else "950PR"
    if "910_93" in n or "A3" in n:
        return "A3"
    return DEFAULT_PROFILE


def _requested_index(request: str) -> int:
    if ":" in request:
        return int(request.split(":", 1)[1])
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def _cpu(reason: str) -> DeviceInfo:
    profile = os.environ.get("LABKIT_PROFILE") or DEFAULT_PROFILE
    cores = os.cpu_count() or 1
    name = f"CPU emulation of {profile} ({platform.machine() or 'cpu'}, {cores} cores)"
    return DeviceInfo("cpu-emu", "cpu", name, profile, None, None, reason)


def get_device() -> DeviceInfo:
    """The device this lab should use (see the module docstring for the rules)."""
    request = (os.environ.get("LABKIT_DEVICE") or "auto").strip().lower()
    if request in ("cpu", "cpu-emu"):
        return _cpu("LABKIT_DEVICE=cpu")
    if request != "auto" and not request.startswith("npu"):
        raise DeviceUnavailable(f"LABKIT_DEVICE={request!r}: use cpu, npu, npu:N or auto")
    required = request.startswith("npu")

    torch_npu, why = _torch_npu()
    api = _npu_api(torch_npu) if torch_npu is not None else None
    if torch_npu is not None:
        if api is None or not api.is_available():
            why = "torch_npu is installed but no NPU is available"
        else:
            count = int(api.device_count())
            index = _requested_index(request)
            if not 0 <= index < count:
                why = f"npu:{index} requested but this process sees {count} NPU(s)"
            else:
                try:
                    name = str(api.get_device_name(index))
                except Exception:
                    name = "Ascend NPU"
                visible = visible_devices()
                physical = visible[index] if visible is not None and index < len(visible) else index
                profile = os.environ.get("LABKIT_PROFILE") or guess_profile(name)
                reason = "LABKIT_DEVICE=" + request if required else "torch_npu sees an NPU"
                return DeviceInfo("npu", f"npu:{index}", name, profile, index, physical, reason)
    if required:
        raise DeviceUnavailable(f"LABKIT_DEVICE={request} but {why}")
    return _cpu(why)


def describe() -> dict[str, Any]:
    """A JSON-ready summary for the getting-started lab and the dashboard."""
    import torch

    info = get_device()
    torch_npu = sys.modules.get("torch_npu")
    npu_version = getattr(torch_npu, "__version__", None) if torch_npu is not None else None
    return {
        "kind": info.kind,
        "device": info.torch_device,
        "name": info.name,
        "profile": info.profile,
        "index": info.index,
        "physical_id": info.physical_id,
        "visible_devices": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
        "reason": info.reason,
        "torch": torch.__version__,
        "torch_npu": str(npu_version) if npu_version is not None else None,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
