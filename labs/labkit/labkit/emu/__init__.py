"""labkit.emu: the emulated device (memory budget, transfers, roofline cost model, streams).

Public API (stable; other labkit modules and every lab code against it)::

    account(op, *, flops, bytes, launches=1, fused=False, engine="device", stream=None, dtype=None)
    session(profile="910B", *, graph_mode=False, scale=None) -> EmuSession   # context manager
    current() -> EmuSession | None

See docs/labkit.md ("Emulated device") for the cost model and every constant with its source.
"""

from .cost import ENGINES, OpCost, op_cost
from .memory import DeviceMemory, OutOfDeviceMemory, fmt_bytes, tensor_nbytes
from .profiles import (
    DEFAULT_SCALE,
    PROFILES,
    Constant,
    DeviceProfile,
    HostProfile,
    get_profile,
    profile_names,
)
from .report import EmuReport, OpStats, StreamRow
from .session import EmuSession, Measurer, NpuMeasurer, account, accounting_active, current, session
from .streams import MAIN, Event

__all__ = [
    "DEFAULT_SCALE",
    "ENGINES",
    "MAIN",
    "PROFILES",
    "Constant",
    "DeviceMemory",
    "DeviceProfile",
    "EmuReport",
    "EmuSession",
    "Event",
    "HostProfile",
    "Measurer",
    "NpuMeasurer",
    "OpCost",
    "OpStats",
    "OutOfDeviceMemory",
    "StreamRow",
    "account",
    "accounting_active",
    "current",
    "fmt_bytes",
    "get_profile",
    "op_cost",
    "profile_names",
    "session",
    "tensor_nbytes",
]
