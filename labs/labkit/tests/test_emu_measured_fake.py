"""The measured path (real NPU) exercised with a fake device: synchronize + timers, no cost model."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
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


class FakeTorchNpu:
    """The slice of ``torch`` + ``torch_npu`` that NpuMeasurer uses: ``torch.npu.*``."""

    def __init__(self) -> None:
        self.log: list[str] = []
        outer = self

        class Npu:
            @staticmethod
            def synchronize() -> None:
                outer.log.append("synchronize")

            class Stream:
                def __init__(self, device: str) -> None:
                    outer.log.append(f"Stream({device})")

            @staticmethod
            def stream(s: Any) -> AbstractContextManager[Any]:
                outer.log.append("stream")
                return nullcontext()

        self.npu = Npu


def test_fake_torch_npu_drives_the_real_npu_measurer():
    fake = FakeTorchNpu()
    m = emu.NpuMeasurer("npu:0")
    m._torch = fake  # the real class, with torch_npu replaced by the fake above
    with emu.session("A3", measurer=m) as s:
        with s.stream("copy"):
            emu.account("h2d_like", flops=0, bytes=10, engine="h2d")
        with s.stream("copy"):
            pass
        with s.stream("main"):
            pass
        s.synchronize()
    assert fake.log.count("Stream(npu:0)") == 1  # one device stream per name, reused
    assert fake.log.count("stream") == 2  # "main" is the default stream: no switch
    assert fake.log.count("synchronize") >= 3
    assert s.report().mode == "measured" and s.report().elapsed_ms >= 0
