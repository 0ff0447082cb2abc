"""labkit.dist: attendee functions on 4 real gloo ranks; hangs become failures, never hung tests."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from labkit import dist as ldist
from labkit.check import Failure

ATTENDEE = """
import os, time
import torch, torch.distributed as dist
from labkit import dist as ldist

def a2a(rank, world, n):
    x = torch.arange(world * n, dtype=torch.float32) + 100 * rank
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    return out

def per_rank(rank, world, value):
    return [rank, world, value, os.environ.get("LAB_RUN_ID")]

def subset(rank, world, pid_dir):
    open(os.path.join(pid_dir, str(rank)), "w").write(str(os.getpid()))
    x = torch.ones(3)
    if rank != 2:
        dist.all_reduce(x)
    return x

def ring_send_first(rank, world):
    buf = torch.empty(4)
    dist.send(torch.full((4,), float(rank)), (rank + 1) % world)
    dist.recv(buf, (rank - 1) % world)
    return buf

def different_calls(rank, world):
    x = torch.ones(2)
    if rank == 0:
        dist.broadcast(x, 0)
    else:
        dist.all_reduce(x)
    return x

def boom(rank, world):
    dist.barrier()
    if rank == 1:
        raise ValueError("bad shard")
    return rank

def raise_before_collective(rank, world):
    if rank == 3:
        raise RuntimeError("shape mismatch on rank 3")
    dist.barrier()

def spin(rank, world):
    if rank == 1:
        while True:
            time.sleep(0.01)
    dist.barrier()

def pipe(rank, world):
    x = torch.zeros(1000)
    if rank > 0:
        dist.recv(x, rank - 1)
    ldist.charge(1.0)
    if rank < world - 1:
        dist.send(x + 1, rank + 1)
    return [ldist.now(), ldist.busy(), float(x[0])]
"""


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "att.py").write_text(textwrap.dedent(ATTENDEE))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_values_from_every_rank(lab: Path) -> None:
    res = ldist.run_ranks("att.py", "a2a", 4, 2)
    assert res.ok and res.hang is None
    assert [v.tolist() for v in res.values()][1] == [2.0, 3.0, 102.0, 103.0, 202.0, 203.0, 302.0, 303.0]
    calls = res.ranks[0].calls
    assert [c["op"] for c in calls] == ["all_to_all_single"] and calls[0]["shapes"][1] == [8]


def test_the_supervisor_is_forked_by_the_fork_server_and_its_cpu_counted(lab: Path) -> None:
    from labkit.check import spending

    (lab / "torch.py").write_text("raise SystemExit('an attendee file must not shadow torch')\n")
    before = spending.spawned_cpu_s()
    res = ldist.run_ranks("att.py", "pipe", 4)
    assert res.ok, res.stderr
    assert spending.spawned_cpu_s() > before  # the ranks' CPU, measured by the fork server


def test_rank_args_and_clean_environment(lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_RUN_ID", "secret-run")
    res = ldist.run_ranks("att.py", "per_rank", 4, rank_args=[(10 * r,) for r in range(4)])
    assert res.values() == [[r, 4, 10 * r, None] for r in range(4)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state


def test_collective_on_some_ranks_is_a_deadlock_named_and_reaped(lab: Path, tmp_path: Path) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    res = ldist.run_ranks("att.py", "subset", 4, str(pid_dir), timeout=120)
    assert res.hang is not None and res.hang.kind == "deadlock"  # seen early, not at the 120 s timeout
    assert "Rank 2 never joined the all_reduce (call 1) that rank 0, 1, 3 wait in" in res.hang.message
    assert res.ranks[2].error is None and all(res.ranks[r].error is not None for r in (0, 1, 3))
    with pytest.raises(Failure, match="never joined"):
        res.unwrap()
    pids = [int((pid_dir / str(r)).read_text()) for r in range(4)]
    for _ in range(100):  # SIGKILLed already; on a loaded machine the exit itself can take a moment
        if not any(_alive(p) for p in pids):
            break
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_ring_where_every_rank_sends_first(lab: Path) -> None:
    res = ldist.run_ranks("att.py", "ring_send_first", 4, timeout=120)
    assert res.hang is not None and res.hang.kind == "deadlock"
    assert "Every rank is blocked in dist.send (0 -> 1, 1 -> 2, 2 -> 3, 3 -> 0)" in res.hang.message


def test_different_collectives_on_different_ranks(lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_LANG", "zh")
    res = ldist.run_ranks("att.py", "different_calls", 4, timeout=120)
    assert res.hang is not None
    assert "broadcast" in res.hang.message and "all_reduce" in res.hang.message and "死锁" in res.hang.message


def test_exception_on_one_rank(lab: Path) -> None:
    res = ldist.run_ranks("att.py", "boom", 4)
    assert res.hang is None and res.values() == [0, None, 2, 3]
    err = res.ranks[1].error
    assert err is not None and err.type == "ValueError" and err.frames[-1].file == "att.py"
    with pytest.raises(Failure, match="On rank 1 of 4"):
        res.unwrap()


def test_an_exception_is_reported_before_the_hang_it_causes(lab: Path) -> None:
    res = ldist.run_ranks("att.py", "raise_before_collective", 4, timeout=120)
    assert res.hang is not None and res.hang.kind == "deadlock"
    with pytest.raises(Failure, match="On rank 3 of 4") as failure:
        res.unwrap()
    assert "shape mismatch on rank 3" in failure.value.message and "waited for it" in failure.value.message


def test_a_rank_that_never_returns_hits_the_timeout(lab: Path) -> None:
    res = ldist.run_ranks("att.py", "spin", 4, timeout=30)  # long enough to start 4 ranks on a loaded machine
    assert res.hang is not None and res.hang.kind == "timeout"
    assert "rank 0: barrier (call 1)" in res.hang.message and "rank 1: running" in res.hang.message


def test_emulated_clock_travels_with_send_and_recv(lab: Path) -> None:
    res = ldist.run_ranks("att.py", "pipe", 4, link_bytes_per_s=4000.0)  # 4000 bytes: 1 s per hop
    assert res.values() == [[1.0, 1.0, 0.0], [3.0, 1.0, 1.0], [5.0, 1.0, 2.0], [7.0, 1.0, 3.0]]


def test_diagnose_never_calls_a_matched_collective_a_deadlock() -> None:
    call = {"ev": "enter", "op": "all_reduce", "n": 1}
    states = [("done", None), ("blocked", call), ("blocked", call), ("blocked", call)]
    events = [[call, {"ev": "exit", "op": "all_reduce", "n": 1}, {"ev": "done"}], [call], [call], [call]]
    assert ldist.diagnose(states, events) is None  # rank 0 joined and left: the others are about to
    assert ldist.diagnose(states, [[{"ev": "done"}], [call], [call], [call]]) is not None
    assert ldist.diagnose([("running", None)] + states[1:], events) is None


def test_missing_file_is_an_import_error(lab: Path) -> None:
    res = ldist.run_ranks("nope.py", "f", 2)
    assert all(r.error is not None and r.error.phase == "import" for r in res.ranks)
    assert os.getcwd() == str(lab)
