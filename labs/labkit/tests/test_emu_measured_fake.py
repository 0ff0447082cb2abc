"""The measured path (real NPU) exercised with a fake device: synchronize + timers, no cost model."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import torch
from labkit import emu


class FakeNpu:
    """Stands in for torch_npu: a clock the test moves and a log of calls."""

    def __init__(self) -> None:
        self.t = 100.0
        self.calls: list[str] = []
        self.placed: list[bool] = []

    def synchronize(self) -> None:
        self.calls.append("sync")

    def now(self) -> float:
        return self.t

    def stream(self, name: str) -> AbstractContextManager[Any]:
        @contextmanager
        def ctx():
            self.calls.append(f"enter:{name}")
            yield
            self.calls.append(f"exit:{name}")

        return ctx()

    def place(self, tensor: Any, to_device: bool) -> Any:
        self.placed.append(to_device)
        return tensor.clone()


def test_fake_npu_session_reports_measured_time():
    npu = FakeNpu()
    with emu.session("910B", measurer=npu) as s:
        assert s.mode == "measured"
        emu.account("matmul", flops=2e12, bytes=1e9)
        npu.t += 0.0125
        assert s.elapsed_ms() == pytest.approx(12.5)
        npu.t += 0.0025
    assert npu.calls.count("sync") >= 3  # at start, for elapsed_ms, at the end
    r = s.report()
    assert r.mode == "measured"
    assert r.elapsed_ms == pytest.approx(15.0)
    assert r.ops["matmul"].count == 1 and r.ops["matmul"].flops == 2e12
    assert r.ops["matmul"].time_ms == 0.0  # ops are not timed one by one on the device
    assert "measured" in str(r)


def test_fake_npu_streams_and_transfers_use_the_device():
    npu = FakeNpu()
    t = torch.ones(8, 8)
    with emu.session("910B", measurer=npu) as s:
        with s.stream("copy"):
            dev = s.memory.to_device(t, "w")
        back = s.memory.to_host(dev)
        s.synchronize()
        r = s.report()
    assert "enter:copy" in npu.calls and "exit:copy" in npu.calls
    assert npu.placed == [True, False]
    assert dev is not t and torch.equal(back, t)
    assert r.h2d_bytes == 256 and s.memory.holds("w") == 256  # budget accounting still applies


def test_fake_npu_memory_budget_is_the_same_as_emulation():
    with emu.session("910B", measurer=FakeNpu()) as measured, emu.session("910B", measurer=False) as emulated:
        assert measured.memory.capacity == emulated.memory.capacity
