"""Emulation sessions: the object labs open around the code they want measured.

``with labkit.emu.session("910B") as s:`` makes ``s`` the current session; every
``labkit.emu.account(...)`` call (labkit.npu ops, the tiny models, lab code) is then charged
to it. Outside a session ``account`` does nothing, so the same lab code runs unmeasured.

On a CPU the session is *emulated*: time comes from the cost model (:mod:`.cost`) and the
stream rules (:mod:`.streams`), never from the wall clock, so the figures are identical on
any machine. On a real NPU (``labkit.device.get_device().kind == "npu"``) the session is
*measured*: ``elapsed_ms`` is wall time between the session start and a device
synchronize; op counts, FLOPs, bytes and memory accounting work the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from .cost import rates
from .memory import DeviceMemory
from .profiles import DEFAULT_SCALE, DeviceProfile, get_profile
from .report import EmuReport, OpStats, StreamRow
from .streams import MAIN, Event, Timeline

_ACTIVE: list[EmuSession] = []


class Measurer(Protocol):
    """How a measured session talks to a real device (see :class:`NpuMeasurer`)."""

    def synchronize(self) -> None: ...

    def now(self) -> float: ...

    def stream(self, name: str) -> AbstractContextManager[Any]: ...

    def place(self, tensor: Any, to_device: bool) -> Any: ...


class NpuMeasurer:
    """Measured mode on an Ascend NPU through ``torch_npu``: device streams, synchronize, timers."""

    def __init__(self, torch_device: Any):
        import torch

        self._torch = torch
        self._device = torch_device
        self._streams: dict[str, Any] = {}

    def synchronize(self) -> None:
        self._torch.npu.synchronize()  # type: ignore[attr-defined]

    def now(self) -> float:
        return time.perf_counter()

    def stream(self, name: str) -> AbstractContextManager[Any]:
        if name == MAIN:
            return nullcontext()
        if name not in self._streams:
            self._streams[name] = self._torch.npu.Stream(device=self._device)  # type: ignore[attr-defined]
        return self._torch.npu.stream(self._streams[name])  # type: ignore[attr-defined,no-any-return]

    def place(self, tensor: Any, to_device: bool) -> Any:
        return tensor.to(self._device if to_device else "cpu", non_blocking=True)


def _default_measurer() -> Measurer | None:
    """A measurer when labkit.device reports a real NPU, else None (emulate)."""
    from labkit import device  # lazily: labkit.device probes torch_npu

    info = device.get_device()
    if getattr(info, "kind", "cpu-emu") == "npu":
        return NpuMeasurer(info.torch_device)
    return None


class EmuSession:
    """One measured run. Use as a context manager; see the module docstring."""

    def __init__(
        self,
        profile: str | DeviceProfile | None = "910B",
        *,
        graph_mode: bool = False,
        scale: float | None = None,
        measurer: Measurer | None | bool = True,
    ):
        if profile is None:  # the profile labkit.device picked (LABKIT_PROFILE or the NPU's)
            from labkit import device  # lazily, as above

            profile = device.get_device().profile
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.scale = DEFAULT_SCALE if scale is None else float(scale)
        if self.scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.graph_mode = graph_mode
        self._graph_depth = 0
        self._engine_override: list[str] = []
        self._paused = 0
        # measurer=True: decide from labkit.device; None/False: always emulate; object: use it
        self._measurer: Measurer | None = (
            _default_measurer() if measurer is True else (None if measurer is False else measurer)
        )
        self._stream_stack: list[tuple[str, float]] = [(MAIN, 0.0)]
        self._timeline = Timeline()
        self._ops: dict[str, OpStats] = {}
        self._bound_by_engine: dict[str, float] = {}
        self._h2d = 0
        self._d2h = 0
        self._launches = 0
        self._rates: dict[tuple[str, str | None, bool], tuple[float, float, float]] = {}
        self._t0: float | None = None
        self._measured_s: float | None = None
        self.memory = DeviceMemory(
            int(self.profile.hbm_capacity.value * self.scale),
            transfer=self._transfer,
            place=self._measurer.place if self._measurer is not None else None,
        )

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "measured" if self._measurer is not None else "emulated"

    def __enter__(self) -> EmuSession:
        _ACTIVE.append(self)
        if self._measurer is not None:
            self._measurer.synchronize()
            self._t0 = self._measurer.now()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._measurer is not None and self._t0 is not None:
            self._measurer.synchronize()
            self._measured_s = self._measurer.now() - self._t0
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    # -- accounting ----------------------------------------------------------------------
    @property
    def in_graph(self) -> bool:
        return self.graph_mode or self._graph_depth > 0

    @property
    def current_stream(self) -> str:
        return self._stream_stack[-1][0]

    def account(
        self,
        op: str,
        *,
        flops: float,
        bytes: float,
        launches: int = 1,
        fused: bool = False,
        engine: str = "device",
        stream: str | None = None,
        dtype: str | None = None,
    ) -> float:
        """Charge one op; returns its emulated duration in ms (0 in measured mode).

        Inside ``on_host()`` device ops are charged to the host instead; inside ``paused()``
        nothing is charged (returns 0).
        """
        if self._paused:
            return 0.0
        if engine == "device" and self._engine_override:
            engine = self._engine_override[-1]
        graph = self.graph_mode or self._graph_depth > 0
        key = (engine, dtype, graph)
        r = self._rates.get(key)
        if r is None:
            r = self._rates[key] = rates(self.profile, engine, dtype, graph, self.scale)
        if flops < 0 or bytes < 0 or launches < 0:
            raise ValueError(
                f"negative cost figures for {op!r}: flops={flops}, bytes={bytes}, launches={launches}"
            )
        # the cost model of cost.op_cost, inlined: this runs for every op of every model
        compute = flops / r[0] if r[0] else 0.0
        memory = bytes / r[1]
        launch = r[2] * launches
        roof = compute if compute > memory else memory
        bound = "launch" if launch > roof else ("compute" if compute >= memory else "memory")
        top = self._stream_stack[-1]
        if stream is None:
            name, floor = top[0], top[1]
        else:
            name, floor = stream, self._floor_for(stream)
        dur = roof + launch if self._measurer is None else 0.0
        self._timeline.issue(name, engine, dur, floor)
        st = self._ops.get(op)
        if st is None:
            st = self._ops[op] = OpStats(op=op, engine=engine)
        st.count += 1
        st.launches += launches
        st.fused += int(fused)
        st.flops += flops
        st.bytes += bytes
        st.time_ms += dur * 1e3
        st.bound[bound] = st.bound.get(bound, 0) + 1
        if engine != st.engine and st.engine != "mixed":
            st.engine = "mixed"
        self._bound_by_engine[engine] = self._bound_by_engine.get(engine, 0.0) + dur
        self._launches += launches
        return dur * 1e3

    def _floor_for(self, name: str) -> float:
        # explicit stream= argument: the issuing (current) stream's clock is the floor
        if name == self.current_stream:
            return self._stream_stack[-1][1]
        return self._timeline.clock(self.current_stream)

    def _transfer(self, direction: str, nbytes: int, tag: str) -> None:
        if direction == "h2d":
            self._h2d += nbytes
        else:
            self._d2h += nbytes
        self.account(direction, flops=0.0, bytes=float(nbytes), launches=1, engine=direction)

    def host_compute(self, op: str, flops: float, bytes: float) -> float:
        """CPU work (e.g. cold experts on the host) charged at host FLOP/s and bandwidth.

        Runs on the current stream: issue it inside ``stream("cpu")`` to overlap the device.
        """
        return self.account(op, flops=flops, bytes=bytes, launches=0, engine="host")

    # -- streams, events, graph ----------------------------------------------------------
    @contextmanager
    def stream(self, name: str) -> Iterator[str]:
        """Issue the work inside on stream ``name`` (it overlaps other streams until a sync)."""
        floor = self._timeline.clock(self.current_stream)
        self._timeline.clocks.setdefault(name, 0.0)
        self._stream_stack.append((name, floor))
        ctx = self._measurer.stream(name) if self._measurer is not None else nullcontext()
        try:
            with ctx:
                yield name
        finally:
            self._stream_stack.pop()

    @contextmanager
    def graph(self) -> Iterator[None]:
        """Ops inside pay the graph-mode launch overhead instead of the eager one."""
        self._graph_depth += 1
        try:
            yield
        finally:
            self._graph_depth -= 1

    @contextmanager
    def on_host(self) -> Iterator[None]:
        """Charge the device ops issued inside to the host CPU (host FLOP/s and bandwidth, no
        launch cost): run ordinary model code, such as one expert, "on the CPU". Combine with
        ``stream("cpu")`` to overlap it with the device."""
        self._engine_override.append("host")
        try:
            yield
        finally:
            self._engine_override.pop()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Charge nothing inside (e.g. a reference computation inside a measured region)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def synchronize(self) -> None:
        """Wait for every stream (device-wide sync)."""
        self._timeline.synchronize()
        if self._measurer is not None:
            self._measurer.synchronize()

    def record_event(self, stream: str | None = None) -> Event:
        """Mark the current point of ``stream`` (default: the current stream)."""
        return self._timeline.record(stream or self.current_stream)

    def wait_event(self, event: Event, stream: str | None = None) -> None:
        """Make ``stream`` (default: current) wait until ``event`` has happened."""
        self._timeline.wait(stream or self.current_stream, event)

    def wait_stream(self, other: str, stream: str | None = None) -> None:
        """Make ``stream`` (default: current) wait for all work issued so far on ``other``."""
        self.wait_event(self.record_event(other), stream)

    # -- results -------------------------------------------------------------------------
    def elapsed_ms(self) -> float:
        """Emulated makespan so far (all streams), or measured wall time in measured mode."""
        if self._measurer is None:
            return self._timeline.elapsed() * 1e3
        if self._measured_s is not None:
            return self._measured_s * 1e3
        if self._t0 is None:
            return 0.0
        self._measurer.synchronize()
        return (self._measurer.now() - self._t0) * 1e3

    def stream_ms(self, name: str) -> float:
        """Where stream ``name``'s clock stands (emulated ms)."""
        return self._timeline.clock(name) * 1e3

    def report(self) -> EmuReport:
        streams = {
            name: StreamRow(
                stream=name,
                ops=self._timeline.stats[name].ops if name in self._timeline.stats else 0,
                busy_ms=(self._timeline.stats[name].busy_s * 1e3) if name in self._timeline.stats else 0.0,
                end_ms=clock * 1e3,
            )
            for name, clock in self._timeline.clocks.items()
        }
        return EmuReport(
            profile=self.profile.name,
            mode=self.mode,
            scale=self.scale,
            graph_mode=self.graph_mode,
            elapsed_ms=self.elapsed_ms(),
            ops={k: OpStats(**{**v.__dict__, "bound": dict(v.bound)}) for k, v in self._ops.items()},
            streams=streams,
            engines_busy_ms={k: v * 1e3 for k, v in sorted(self._bound_by_engine.items())},
            h2d_bytes=self._h2d,
            d2h_bytes=self._d2h,
            launches=self._launches,
            peak_memory_bytes=self.memory.peak,
            capacity_bytes=self.memory.capacity,
            peak_by_tag=self.memory.peak_by_tag(),
            used_by_tag=self.memory.used_by_tag(),
        )


def session(
    profile: str | None = "910B",
    *,
    graph_mode: bool = False,
    scale: float | None = None,
    measurer: Measurer | None | bool = True,
) -> EmuSession:
    """A new session (use ``with``). ``scale`` defaults to ``2**-10`` (64 GiB -> 64 MiB).

    ``profile=None`` takes the profile ``labkit.device.get_device()`` reports (``LABKIT_PROFILE``).

    ``measurer``: ``True`` (default) measures on a real NPU and emulates elsewhere;
    ``False`` always emulates; an object implementing :class:`Measurer` is used as is.
    """
    return EmuSession(profile, graph_mode=graph_mode, scale=scale, measurer=measurer)


def current() -> EmuSession | None:
    """The innermost active session, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def account(
    op: str,
    *,
    flops: float,
    bytes: float,
    launches: int = 1,
    fused: bool = False,
    engine: str = "device",
    stream: str | None = None,
    dtype: str | None = None,
) -> None:
    """Charge one op to the current session; does nothing when no session is active."""
    s = current()
    if s is not None:
        s.account(
            op,
            flops=flops,
            bytes=bytes,
            launches=launches,
            fused=fused,
            engine=engine,
            stream=stream,
            dtype=dtype,
        )


def accounting_active() -> bool:
    """True inside a session (lets callers skip computing costs when nobody listens)."""
    return bool(_ACTIVE)
