"""The fake ``torch.npu`` / ``torch_npu.npu`` runtime: devices, streams, events, memory queries.

Work on the fake device is synchronous CPU work, so streams and events only check how they are
used (right types, events recorded before they are timed or waited on) and count what was asked.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

#: the fake card's capacity for ``mem_get_info`` / ``get_device_properties`` (a 910B's 64 GiB)
TOTAL_MEMORY = 64 * 1024**3


class _Memory:
    """Bytes of live fake-device tensors per device (storages counted once, however many views)."""

    def __init__(self, count: int) -> None:
        self.allocated = [0] * count
        self.peak = [0] * count
        self._live: dict[int, list[int]] = {}  # storage data_ptr -> [device, nbytes, wrappers]
        self._lock = threading.Lock()

    def track(self, ptr: int, device: int, nbytes: int) -> bool:
        """Count one more tensor on storage ``ptr``; True when it is the first (a new allocation)."""
        with self._lock:
            entry = self._live.get(ptr)
            if entry is not None:
                entry[2] += 1
                return False
            self._live[ptr] = [device, nbytes, 1]
            self.allocated[device] += nbytes
            self.peak[device] = max(self.peak[device], self.allocated[device])
            return True

    def release(self, ptr: int) -> None:
        with self._lock:
            entry = self._live.get(ptr)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] == 0:
                del self._live[ptr]
                self.allocated[entry[0]] -= entry[1]


def make_runtime(count: int, name: str) -> types.ModuleType:
    """The module installed as ``torch.npu`` (and ``torch_npu.npu``)."""
    rt = types.ModuleType("torch_npu.npu", "FAKE torch.npu runtime (labkit.npu_fake)")
    state = threading.local()
    memory = _Memory(max(count, 1))
    stats: dict[str, Any] = {
        "streams": 0,
        "stream_switches": 0,
        "events_recorded": 0,
        "synchronize": 0,
        "elapsed_time": 0,
    }
    current = {"device": 0}

    def _index(device: Any = None) -> int:
        if device is None:
            return int(current["device"])
        if isinstance(device, int):
            idx = device
        else:
            d = torch.device(device)
            if d.type != "npu":
                raise ValueError(f"expected an npu device, got {d}")
            idx = d.index if d.index is not None else int(current["device"])
        if not 0 <= idx < count:
            raise RuntimeError(f"npu:{idx} is not available: this process sees {count} NPU(s) (fake)")
        return idx

    class Stream:
        """A fake NPU stream: ``wait_stream`` / ``wait_event`` / ``record_event`` / ``synchronize``."""

        def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
            self.device = torch.device("npu", _index(device))
            self.priority = priority
            stats["streams"] += 1

        def _check(self, other: Any, kind: type, what: str) -> None:
            if not isinstance(other, kind):
                raise TypeError(f"{what} expects a torch.npu.{kind.__name__}, got {type(other).__name__}")

        def wait_stream(self, stream: Any) -> None:
            self._check(stream, Stream, "Stream.wait_stream")

        def wait_event(self, event: Any) -> None:
            self._check(event, Event, "Stream.wait_event")
            if not event._recorded:
                raise RuntimeError("Stream.wait_event: the event was never recorded (fake NPU)")

        def record_event(self, event: Any = None) -> Event:
            event = Event() if event is None else event
            event.record(self)
            return event

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            stats["synchronize"] += 1

        def __repr__(self) -> str:
            return f"<torch_npu.npu.Stream (fake) device={self.device} at {id(self):#x}>"

    class Event:
        """A fake NPU event; ``elapsed_time`` is CPU wall time between two records (ms)."""

        def __init__(
            self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
        ) -> None:
            self.enable_timing = enable_timing
            self._recorded = False
            self._t = 0.0

        def record(self, stream: Any = None) -> None:
            if stream is not None and not isinstance(stream, Stream):
                raise TypeError(f"Event.record expects a torch.npu.Stream, got {type(stream).__name__}")
            self._recorded = True
            self._t = time.perf_counter()
            stats["events_recorded"] += 1

        def wait(self, stream: Any = None) -> None:
            if stream is not None and not isinstance(stream, Stream):
                raise TypeError(f"Event.wait expects a torch.npu.Stream, got {type(stream).__name__}")

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            stats["synchronize"] += 1

        def elapsed_time(self, end_event: Event) -> float:
            if not (self.enable_timing and end_event.enable_timing):
                raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
            if not (self._recorded and end_event._recorded):
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            stats["elapsed_time"] += 1
            return (end_event._t - self._t) * 1e3

    default_streams: dict[int, Stream] = {}

    def default_stream(device: Any = None) -> Stream:
        idx = _index(device)
        if idx not in default_streams:
            default_streams[idx] = Stream(idx)
            stats["streams"] -= 1  # the default stream is not one the lab made
        return default_streams[idx]

    def current_stream(device: Any = None) -> Stream:
        stack = getattr(state, "streams", None)
        return stack[-1] if stack else default_stream(device)

    def set_stream(stream: Stream) -> None:
        if not isinstance(stream, Stream):
            raise TypeError(f"set_stream expects a torch.npu.Stream, got {type(stream).__name__}")
        state.streams = [stream]

    @contextmanager
    def stream(s: Stream | None) -> Iterator[None]:
        if s is None:
            yield
            return
        if not isinstance(s, Stream):
            raise TypeError(f"torch.npu.stream expects a torch.npu.Stream or None, got {type(s).__name__}")
        stack = getattr(state, "streams", None)
        if stack is None:
            stack = state.streams = []
        stack.append(s)
        stats["stream_switches"] += 1
        try:
            yield
        finally:
            stack.pop()

    def synchronize(device: Any = None) -> None:
        _index(device)
        stats["synchronize"] += 1

    def set_device(device: Any) -> None:
        current["device"] = _index(device)

    @contextmanager
    def device(d: Any) -> Iterator[None]:
        before = current["device"]
        current["device"] = _index(d)
        try:
            yield
        finally:
            current["device"] = before

    def memory_allocated(device: Any = None) -> int:
        return memory.allocated[_index(device)]

    def max_memory_allocated(device: Any = None) -> int:
        return memory.peak[_index(device)]

    def reset_peak_memory_stats(device: Any = None) -> None:
        idx = _index(device)
        memory.peak[idx] = memory.allocated[idx]

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return TOTAL_MEMORY - memory.allocated[_index(device)], TOTAL_MEMORY

    def get_device_properties(device: Any = None) -> Any:
        _index(device)
        return types.SimpleNamespace(name=name, total_memory=TOTAL_MEMORY)

    def manual_seed(seed: int) -> None:
        # the fake device draws from the CPU generator (torch.manual_seed calls this one too)
        torch.default_generator.manual_seed(int(seed))

    funcs: dict[str, Any] = {
        "Stream": Stream,
        "Event": Event,
        "stream": stream,
        "current_stream": current_stream,
        "default_stream": default_stream,
        "set_stream": set_stream,
        "synchronize": synchronize,
        "set_device": set_device,
        "device": device,
        "current_device": lambda: int(current["device"]),
        "device_count": lambda: count,
        "is_available": lambda: count > 0,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "_lazy_init": lambda: None,
        "_is_in_bad_fork": lambda: False,
        "is_bf16_supported": lambda: True,
        "get_device_name": lambda device=None: (_index(device), name)[1],
        "get_device_properties": get_device_properties,
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_allocated,
        "max_memory_reserved": max_memory_allocated,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_max_memory_allocated": reset_peak_memory_stats,
        "empty_cache": lambda: None,
        "mem_get_info": mem_get_info,
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed,
        "seed": lambda: torch.seed(),
        "initial_seed": lambda: torch.initial_seed(),
        "_index": _index,
        "_memory": memory,
        "_stats": stats,
        "__labkit_fake__": True,
    }
    for key, value in funcs.items():
        setattr(rt, key, value)
    return rt
