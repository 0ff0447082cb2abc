"""The roofline cost model: one accounted op -> emulated seconds.

For an op on engine ``device``::

    t = max(flops / (peak_flops(dtype) * s), bytes / (hbm_bandwidth * s)) + launch * launches

where ``s`` is the session's toy scale and ``launch`` is the eager launch overhead, or the
(much smaller) graph-mode overhead inside ``session.graph()`` / ``graph_mode=True``.
Engine ``host`` uses the host's FLOP/s and memory bandwidth and has no launch cost; engines
``h2d`` / ``d2h`` move ``bytes`` over the host link and pay one launch per copy.
Fusion and quantisation are not special cases: the caller passes fewer launches / bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .profiles import DeviceProfile

ENGINES = ("device", "host", "h2d", "d2h")


@dataclass(frozen=True)
class OpCost:
    """Seconds of compute, memory traffic and launch overhead for one op."""

    compute_s: float
    memory_s: float
    launch_s: float

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.launch_s

    @property
    def bound(self) -> str:
        """ "compute", "memory" or "launch": what dominates this op's time."""
        roof = max(self.compute_s, self.memory_s)
        if self.launch_s > roof:
            return "launch"
        return "compute" if self.compute_s >= self.memory_s else "memory"


def op_cost(
    profile: DeviceProfile,
    *,
    flops: float,
    bytes: float,
    launches: int = 1,
    engine: str = "device",
    dtype: str | None = None,
    graph_mode: bool = False,
    scale: float = 1.0,
) -> OpCost:
    """Emulated cost of one op under ``profile`` at toy ``scale`` (see the module docstring)."""
    if flops < 0 or bytes < 0 or launches < 0:
        raise ValueError(f"negative cost figures: flops={flops}, bytes={bytes}, launches={launches}")
    launch = (profile.graph_launch_overhead if graph_mode else profile.launch_overhead).value
    if engine == "device":
        return OpCost(
            flops / (profile.peak(dtype) * scale),
            bytes / (profile.hbm_bandwidth.value * scale),
            launch * launches,
        )
    if engine == "host":
        host = profile.host
        return OpCost(flops / (host.flops.value * scale), bytes / (host.mem_bandwidth.value * scale), 0.0)
    if engine == "h2d":
        return OpCost(0.0, bytes / (profile.h2d_bandwidth.value * scale), launch * launches)
    if engine == "d2h":
        return OpCost(0.0, bytes / (profile.d2h_bandwidth.value * scale), launch * launches)
    raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
