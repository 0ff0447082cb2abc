"""Per-environment limits: finding the mechanism (pure, on /proc text), writing a group's limits
(on a fake cgroup tree), the rlimit fallback, and the one this machine really gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labserver.backends import limits
from labserver.backends.limits import CgroupV1Limiter, CgroupV2Limiter, Limits, RlimitLimiter

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
CGROUPS = "8:pids:/\n4:memory:/job/42\n1:cpu:/\n0::/svc\n"


def test_candidates_follow_the_servers_own_cgroups() -> None:
    where = limits.candidates(MOUNTINFO, CGROUPS, parent="", instance="abc")
    assert where["cgroup1"] == {
        "pids": Path("/sys/fs/cgroup/pids/labserver-abc"),
        "memory": Path("/sys/fs/cgroup/memory/job/42/labserver-abc"),
        "cpu": Path("/sys/fs/cgroup/cpu/labserver-abc"),
    }
    assert where["cgroup2"] == {"unified": Path("/sys/fs/cgroup/unified/svc/labserver-abc")}
    # a configured parent replaces the server's own place
    other = limits.candidates(MOUNTINFO, CGROUPS, parent="/labs", instance="abc")
    assert other["cgroup2"]["unified"] == Path("/sys/fs/cgroup/unified/labs/labserver-abc")


def test_a_pure_v2_system_has_no_v1_candidate() -> None:
    info = "30 1 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    where = limits.candidates(info, "0::/user.slice/labserver.service\n", parent="", instance="x")
    assert set(where) == {"cgroup2"}


def _fake_v1(root: Path) -> dict[str, Path]:
    bases = {c: root / c / "labserver-t" for c in limits.V1_CONTROLLERS}
    return bases


def test_cgroup1_writes_pids_memory_and_cpu(tmp_path: Path) -> None:
    limiter = CgroupV1Limiter(_fake_v1(tmp_path))
    # the kernel makes these files in a new cgroup; on a plain folder we make them ourselves
    memsw = tmp_path / "memory" / "labserver-t" / "ev1" / "memory.memsw.limit_in_bytes"
    memsw.parent.mkdir(parents=True)
    memsw.write_text("")
    prefix = limiter.acquire("ev1", Limits(cpus=1.5, memory_mb=512, pids=100), own_uid=True)
    group = {c: tmp_path / c / "labserver-t" / "ev1" for c in limits.V1_CONTROLLERS}
    assert (group["pids"] / "pids.max").read_text() == "100"
    assert (group["memory"] / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert memsw.read_text() == str(512 << 20)
    assert (group["cpu"] / "cpu.cfs_quota_us").read_text() == "150000"
    assert (
        (group["cpu"] / "cpu.shares").read_text() == (group["cpu"].parent / "cpu.shares").read_text() == "256"
    )
    assert prefix[-3:-1] == [prefix[-3], "-n"] and prefix[-3].endswith("nice") and prefix[-1] == "10"
    assert prefix[:2] == ["/bin/sh", "-c"]
    assert [str(group[c] / "cgroup.procs") for c in limits.V1_CONTROLLERS] == prefix[4:7]
    assert "--core=0:0" in prefix and not any(a.startswith("--nproc") for a in prefix)


def test_cgroup2_enables_controllers_and_writes_limits(tmp_path: Path) -> None:
    server = tmp_path / "svc"
    server.mkdir()
    (server / "cgroup.subtree_control").write_text("")
    base = server / "labserver-t"
    base.mkdir()
    (base / "cgroup.subtree_control").write_text("")
    limiter = CgroupV2Limiter({"unified": base})
    limiter.acquire("ev1", Limits(cpus=0.5, memory_mb=256, pids=64), own_uid=False)
    assert (server / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    assert (base / "ev1" / "pids.max").read_text() == "64"
    assert (base / "ev1" / "memory.max").read_text() == str(256 << 20)
    assert (base / "ev1" / "cpu.max").read_text() == "50000 100000"
    assert (base / "ev1" / "cpu.weight").read_text() == (base / "cpu.weight").read_text() == "25"


def test_rlimit_fallback_bounds_processes_and_memory_per_process() -> None:
    limiter = RlimitLimiter()
    own = limiter.rlimits(Limits(memory_mb=512, pids=100), own_uid=True)
    assert "--nproc=100:100" in own and f"--data={512 << 20}:{512 << 20}" in own
    shared = limiter.rlimits(Limits(memory_mb=512, pids=100), own_uid=False)
    nproc = int(next(a for a in shared if a.startswith("--nproc=")).split("=")[1].split(":")[0])
    assert nproc > 100  # the budget above what the server's user already runs
    assert limiter.nice()[-2:] == ["-n", "10"]


def test_forcing_a_mechanism_that_is_missing_fails_loudly() -> None:
    with pytest.raises(RuntimeError, match="cgroup2"):
        limits.detect("cgroup2", mountinfo="", cgroups="", instance="x")
    assert limits.detect("rlimit", mountinfo="", cgroups="").name == "rlimit"


@pytest.mark.usefixtures("as_root")  # CI runs as root: cgroups are writable there
def test_this_machine_gives_cgroup_limits_to_a_root_server() -> None:
    limiter = limits.detect("auto", instance=f"test-{os.getpid()}")
    assert limiter.name in ("cgroup2", "cgroup1"), limiter.detail
