"""labkit.emu: cost model, memory budget, streams, graph mode, report, determinism."""

from __future__ import annotations

import json

import pytest
import torch
from labkit import emu
from labkit.emu import OutOfDeviceMemory, get_profile, op_cost


def test_account_is_a_no_op_without_a_session():
    assert emu.current() is None
    emu.account("matmul", flops=1e9, bytes=1e6)  # must not raise
    assert emu.current() is None


def test_session_is_current_inside_and_gone_after():
    with emu.session("910B", measurer=False) as s:
        assert emu.current() is s
        with emu.session("950DT", measurer=False) as inner:
            assert emu.current() is inner
        assert emu.current() is s
    assert emu.current() is None


def test_roofline_by_hand_at_full_scale():
    p = get_profile("910B")
    # compute-bound: 353.8 TFLOP at 353.8 TFLOP/s = 1 s, plus one 20 us launch
    c = op_cost(p, flops=353.8e12, bytes=1e9, scale=1.0)
    assert c.bound == "compute"
    assert c.total_s == pytest.approx(1.0 + 20e-6)
    # memory-bound: 1.6 GB at 1.6 TB/s = 1 ms
    c = op_cost(p, flops=1e6, bytes=1.6e9, launches=3, scale=1.0)
    assert c.bound == "memory"
    assert c.total_s == pytest.approx(1e-3 + 3 * 20e-6)
    # tiny op: launch-bound
    assert op_cost(p, flops=10, bytes=10, scale=1.0).bound == "launch"


def test_scale_divides_every_rate_and_the_capacity():
    p = get_profile("910B")
    full = op_cost(p, flops=0, bytes=1.6e9, launches=0, scale=1.0).total_s
    toy = op_cost(p, flops=0, bytes=1.6e9 / 1024, launches=0, scale=1 / 1024).total_s
    assert toy == pytest.approx(full)
    with emu.session("910B", measurer=False) as s:
        assert s.memory.capacity == 64 * 2**20
    with emu.session("950DT", measurer=False) as s:
        assert s.memory.capacity == 144 * 2**20
    with emu.session("950PR", measurer=False, scale=1.0) as s:
        assert s.memory.capacity == 128 * 2**30


def test_graph_mode_removes_most_launch_overhead():
    def run(graph_mode: bool) -> float:
        with emu.session("910B", graph_mode=graph_mode, measurer=False) as s:
            for _ in range(100):
                emu.account("rms_norm", flops=1e3, bytes=1e3)
            return s.elapsed_ms()

    eager, graph = run(False), run(True)
    assert eager == pytest.approx(100 * 0.020, rel=0.05)
    assert graph < eager / 10

    with emu.session("910B", measurer=False) as s:
        emu.account("a", flops=0, bytes=0)
        with s.graph():
            emu.account("b", flops=0, bytes=0)
        r = s.report()
    assert r.ops["a"].time_ms == pytest.approx(0.020)
    assert r.ops["b"].time_ms == pytest.approx(0.001)


def test_fused_op_is_cheaper_because_the_caller_passes_fewer_launches_and_bytes():
    with emu.session("910B", measurer=False) as s:
        for _ in range(4):
            emu.account("add", flops=1e6, bytes=8e6)
        unfused = s.elapsed_ms()
    with emu.session("910B", measurer=False) as s:
        emu.account("npu_add_rms_norm", flops=4e6, bytes=12e6, fused=True)
        fused = s.elapsed_ms()
        assert s.report().ops["npu_add_rms_norm"].fused == 1
    assert fused < unfused / 2


def test_mx_peak_is_used_only_where_the_chip_has_one():
    p950, p910 = get_profile("950PR"), get_profile("910B")
    assert p950.peak("mxfp4") == 2000e12
    assert p950.peak("mxfp8") == 1000e12
    assert p910.peak("mxfp4") == p910.peak("fp16") == 353.8e12
    assert p910.peak("bfloat16") == p910.peak("bf16")
    with emu.session("950PR", measurer=False) as s:
        emu.account("qmm", flops=2e12, bytes=0, launches=0, dtype="mxfp4")
        emu.account("mm", flops=2e12, bytes=0, launches=0, dtype="bf16")
        ops = s.report().ops
    assert ops["mm"].time_ms / ops["qmm"].time_ms == pytest.approx(2000 / 486.6)


def test_memory_tracks_tags_peak_and_frees():
    with emu.session("910B", measurer=False) as s:
        m = s.memory
        m.alloc("weights", 10 * 2**20)
        m.alloc("kv", 2 * 2**20)
        m.alloc("kv", 2 * 2**20)
        assert m.used_by_tag() == {"weights": 10 * 2**20, "kv": 4 * 2**20}
        assert m.free("kv", 2**20) == 2**20
        assert m.free("kv") == 3 * 2**20
        assert m.free("never-allocated") == 0
        assert m.used == 10 * 2**20 and m.peak == 14 * 2**20
        assert m.peak_by_tag() == {"weights": 10 * 2**20, "kv": 4 * 2**20}
        with pytest.raises(ValueError):
            m.free("weights", 11 * 2**20)


def test_out_of_memory_names_the_biggest_holders_and_the_request():
    with emu.session("910B", measurer=False) as s:
        s.memory.alloc("experts.hot", 40 * 2**20)
        s.memory.alloc("attention", 20 * 2**20)
        s.memory.alloc("kv_cache", 3 * 2**20)
        with pytest.raises(OutOfDeviceMemory) as exc:
            s.memory.alloc("expert.17", 2 * 2**20)
    msg = str(exc.value)
    assert "asked 2.00 MiB for 'expert.17'" in msg
    assert "'experts.hot' 40.00 MiB, 'attention' 20.00 MiB, 'kv_cache' 3.00 MiB" in msg
    assert "of 64.00 MiB" in msg
    assert exc.value.holders[0] == ("experts.hot", 40 * 2**20)
    assert isinstance(exc.value, MemoryError)
    assert s.memory.used == 63 * 2**20  # the failed allocation left nothing behind


def test_to_device_and_to_host_account_transfers():
    t = torch.zeros(1024, 256)  # 1 MiB
    with emu.session("910B", measurer=False) as s:
        out = s.memory.to_device(t, "w")
        assert out is t
        assert s.memory.holds("w") == 2**20
        s.memory.to_host(t, "w")
        r = s.report()
    assert r.h2d_bytes == 2**20 and r.d2h_bytes == 2**20
    assert s.memory.holds("w") == 0
    # 1 MiB at 64 GB/s / 1024, plus one launch
    assert r.ops["h2d"].time_ms == pytest.approx(2**20 / (64e9 / 1024) * 1e3 + 0.020)
    assert r.ops["h2d"].engine == "h2d"


def test_side_stream_copy_overlaps_main_stream_compute_until_sync():
    with emu.session("910B", measurer=False) as s:
        with s.stream("copy"):
            s.memory.to_device(torch.zeros(256, 1024), "next_layer")  # ~16 ms
        emu.account("matmul", flops=0, bytes=20e6)  # ~12.2 ms on main
        copy_ms, main_ms = s.stream_ms("copy"), s.stream_ms("main")
        assert s.elapsed_ms() == pytest.approx(max(copy_ms, main_ms))
        s.synchronize()
        assert s.stream_ms("main") == pytest.approx(max(copy_ms, main_ms))
        r = s.report()
    assert r.overlap_ms == pytest.approx(min(copy_ms, main_ms))
    assert r.streams["copy"].ops == 1


def test_serial_copy_on_the_main_stream_does_not_overlap():
    with emu.session("910B", measurer=False) as s:
        s.memory.to_device(torch.zeros(256, 1024), "next_layer")
        emu.account("matmul", flops=0, bytes=20e6)
        r = s.report()
    assert r.elapsed_ms == pytest.approx(r.serial_ms)
    assert r.overlap_ms == 0


def test_cpu_experts_on_a_side_stream_overlap_device_experts():
    def step(side: bool) -> float:
        with emu.session("910B", measurer=False) as s:
            if side:
                with s.stream("cpu"):
                    s.host_compute("cpu_experts", 1e6, 2e6)
            else:
                s.host_compute("cpu_experts", 1e6, 2e6)
            emu.account("device_experts", flops=1e6, bytes=20e6)
            s.synchronize()
            return s.elapsed_ms()

    serial, overlapped = step(False), step(True)
    assert overlapped < serial
    host_ms = 2e6 / (142e9 / 1024) * 1e3
    assert serial - overlapped == pytest.approx(min(host_ms, serial - host_ms))


def test_two_device_streams_share_the_compute_engine():
    with emu.session("910B", measurer=False) as s:
        emu.account("a", flops=0, bytes=16e6)
        with s.stream("side"):
            emu.account("b", flops=0, bytes=16e6)
        r = s.report()
    assert r.elapsed_ms == pytest.approx(r.serial_ms)


def test_side_stream_work_cannot_start_before_it_is_issued():
    with emu.session("910B", measurer=False) as s:
        emu.account("long", flops=0, bytes=16e6)
        t_issue = s.stream_ms("main")
        with s.stream("copy"):
            s.memory.to_device(torch.zeros(16), "x")
        assert s.stream_ms("copy") > t_issue


def test_events_order_streams():
    with emu.session("910B", measurer=False) as s:
        with s.stream("copy"):
            s.memory.to_device(torch.zeros(256, 1024), "w")
            ready = s.record_event()
        s.wait_event(ready)
        assert s.stream_ms("main") == pytest.approx(s.stream_ms("copy"))
        emu.account("use_w", flops=0, bytes=1e6)
        assert s.stream_ms("main") > s.stream_ms("copy")
        with s.stream("copy"):
            emu.account("more", flops=0, bytes=1e6, engine="h2d")
        s.wait_stream("copy")
        assert s.stream_ms("main") >= s.stream_ms("copy")


def test_unknown_engine_and_profile_are_clear_errors():
    with emu.session("910B", measurer=False), pytest.raises(ValueError, match="unknown engine 'gpu'"):
        emu.account("x", flops=0, bytes=0, engine="gpu")
    with pytest.raises(KeyError, match="known: 910B, 950DT, 950PR, A3"):
        emu.session("H100")


def _program() -> str:
    with emu.session("A3", measurer=False) as s:
        s.memory.to_device(torch.ones(64, 64), "w")
        for i in range(10):
            emu.account("matmul", flops=2e6 * i, bytes=3e5, dtype="bf16")
            with s.stream("cpu"):
                s.host_compute("cpu_expert", 1e5, 1e5)
            emu.account("swiglu", flops=1e4, bytes=1e4, fused=True)
        s.synchronize()
        return s.report().to_json(sort_keys=True)


def test_same_program_gives_identical_figures():
    assert _program() == _program()


def test_report_table_and_json():
    with emu.session("910B", measurer=False) as s:
        emu.account("matmul", flops=2e9, bytes=4e6, dtype="fp16")
        emu.account("matmul", flops=2e9, bytes=4e6, dtype="fp16")
        emu.account("npu_rms_norm", flops=1e3, bytes=1e3, fused=True)
        s.memory.alloc("weights", 3 * 2**20)
        r = s.report()
    d = json.loads(r.to_json())
    assert d["ops"]["matmul"]["count"] == 2 and d["ops"]["matmul"]["launches"] == 2
    assert d["peak_memory_bytes"] == 3 * 2**20 and d["profile"] == "910B" and d["mode"] == "emulated"
    assert d["elapsed_ms"] == pytest.approx(sum(v["time_ms"] for v in d["ops"].values()))
    assert emu.EmuReport.from_json(r.to_json()) == r
    text = str(r)
    assert "matmul" in text and "npu_rms_norm" in text and "peak device memory 3.00 MiB of 64.00 MiB" in text
    assert list(r.time_by_op())[0] == "matmul"


def test_default_session_on_this_cpu_is_emulated():
    with emu.session() as s:
        assert s.mode == "emulated"
        assert s.profile.name == "910B"


def test_profile_none_follows_labkit_device(monkeypatch):
    monkeypatch.setenv("LABKIT_DEVICE", "cpu")
    monkeypatch.setenv("LABKIT_PROFILE", "950DT")
    with emu.session(None) as s:
        assert s.profile.name == "950DT" and s.mode == "emulated"


def test_on_host_charges_device_ops_to_the_cpu_and_paused_charges_nothing():
    with emu.session("910B", measurer=False) as s:
        with s.on_host():
            emu.account("expert", flops=1e6, bytes=2e6)
        emu.account("expert_dev", flops=1e6, bytes=2e6)
        with s.paused():
            emu.account("reference", flops=1e9, bytes=1e9)
        r = s.report()
    assert r.ops["expert"].engine == "host" and r.ops["expert"].launches == 1
    assert r.ops["expert"].time_ms == pytest.approx(2e6 / (142e9 / 1024) * 1e3)
    assert r.ops["expert_dev"].engine == "device"
    assert "reference" not in r.ops
