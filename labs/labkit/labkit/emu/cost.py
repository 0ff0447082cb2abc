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


def rates(
    profile: DeviceProfile, engine: str, dtype: str | None, graph_mode: bool, scale: float
) -> tuple[float, float, float]:
    """(FLOP/s, bytes/s, seconds per launch) of ``engine``; FLOP/s is 0 for the copy engines."""
    launch = (profile.graph_launch_overhead if graph_mode else profile.launch_overhead).value
    if engine == "device":
        return profile.peak(dtype) * scale, profile.hbm_bandwidth.value * scale, launch
    if engine == "host":
        return profile.host.flops.value * scale, profile.host.mem_bandwidth.value * scale, 0.0
    if engine == "h2d":
        return 0.0, profile.h2d_bandwidth.value * scale, launch
    if engine == "d2h":
        return 0.0, profile.d2h_bandwidth.value * scale, launch
    raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")


def cost_from_rates(r: tuple[float, float, float], flops: float, bytes: float, launches: int) -> OpCost:
    if flops < 0 or bytes < 0 or launches < 0:
        raise ValueError(f"negative cost figures: flops={flops}, bytes={bytes}, launches={launches}")
    return OpCost(flops / r[0] if r[0] else 0.0, bytes / r[1], r[2] * launches)


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
    return cost_from_rates(rates(profile, engine, dtype, graph_mode, scale), flops, bytes, launches)
