"""Placement, cards and CPU fallback (pure: no daemon)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labserver.backends.docker.scheduler import (
    FALLBACK_NOTICE,
    Node,
    NoRoom,
    Running,
    Usage,
    load_nodes,
    place,
)

REPO = Path(__file__).resolve().parents[3]
CPU = Node("cpu", "unix:///a.sock", kind="cpu", cpus=2, memory_mb=4096, cpu_overcommit=1, memory_overcommit=1)
NPU = Node("npu", "tcp://npu:2376", kind="npu", cpus=64, memory_mb=65536, cards=(0, 1))
SIM = Node("sim", "unix:///b.sock", kind="npu-simulated", cpus=8, memory_mb=16384, cards=(0, 1))


def occupy(
    usage: Usage, placement_node: str, card: int | None, env: str, cpus: float = 1, mem: int = 1024
) -> None:
    usage.envs.append(Running(env, placement_node, cpus, mem, card))


def test_npu_lab_gets_a_card_never_shared() -> None:
    usage = Usage()
    seen = set()
    for i in range(2):
        p = place([CPU, NPU], usage, device="npu", cpus=1, memory_mb=1024)
        assert p.node.name == "npu" and p.card is not None and p.device == "npu:0"
        assert (p.node.name, p.card) not in seen
        seen.add((p.node.name, p.card))
        occupy(usage, p.node.name, p.card, f"e{i}")
    with pytest.raises(NoRoom) as exc:
        place([CPU, NPU], usage, device="npu", cpus=1, memory_mb=1024)
    assert exc.value.reason == "no-card"


def test_any_lab_falls_back_to_cpu_with_a_notice_when_cards_run_out() -> None:
    usage = Usage()
    occupy(usage, "npu", 0, "a")
    occupy(usage, "npu", 1, "b")
    p = place([CPU, NPU], usage, device="any", cpus=1, memory_mb=1024)
    assert p.card is None and p.device == "cpu-emu"
    assert p.notice == FALLBACK_NOTICE and "CPU emulation" in p.notice


def test_a_freed_card_is_given_again() -> None:
    usage = Usage()
    occupy(usage, "npu", 0, "a")
    p = place([NPU], usage, device="npu", cpus=1, memory_mb=1024)
    assert p.card == 1
    usage.envs.clear()
    assert place([NPU], usage, device="npu", cpus=1, memory_mb=1024).card == 0


def test_cpu_labs_leave_cards_free_and_real_npus_beat_simulated_ones() -> None:
    p = place([NPU, CPU], Usage(), device="cpu", cpus=1, memory_mb=1024)
    assert p.node.name == "cpu" and p.card is None and p.notice == ""
    p = place([SIM, NPU], Usage(), device="npu", cpus=1, memory_mb=1024)
    assert p.node.name == "npu"


def test_npu_simulated_bookkeeps_cards_without_devices() -> None:
    usage = Usage()
    for i in range(2):
        p = place([SIM], usage, device="npu", cpus=1, memory_mb=1024)
        assert p.card == i and p.device == "cpu-emu" and p.device_files() == [] and p.driver_mounts() == []
        assert "simulates" in p.notice
        occupy(usage, "sim", p.card, f"e{i}")
    with pytest.raises(NoRoom):
        place([SIM], usage, device="npu", cpus=1, memory_mb=1024)


def test_node_with_room_and_least_loaded() -> None:
    a = Node("a", "unix:///a", cpus=2, memory_mb=4096, cpu_overcommit=1, memory_overcommit=1)
    b = Node("b", "unix:///b", cpus=2, memory_mb=4096, cpu_overcommit=1, memory_overcommit=1)
    usage = Usage()
    names = []
    for i in range(4):
        p = place([a, b], usage, device="cpu", cpus=1, memory_mb=1024)
        names.append(p.node.name)
        occupy(usage, p.node.name, None, f"e{i}")
    assert sorted(names) == ["a", "a", "b", "b"]
    with pytest.raises(NoRoom) as exc:
        place([a, b], usage, device="cpu", cpus=1, memory_mb=1024)
    assert exc.value.reason == "no-room"
    capped = Node("c", "unix:///c", cpus=64, memory_mb=65536, max_envs=1)
    occupy(usage, "c", None, "x")
    with pytest.raises(NoRoom):
        place([capped], usage, device="cpu", cpus=0.1, memory_mb=10)


def test_example_nodes_file_loads_and_bad_files_are_refused(tmp_path: Path) -> None:
    nodes = load_nodes(REPO / "provisioning" / "nodes.example.yaml")
    by_name = {n.name: n for n in nodes}
    assert {n.url.split(":")[0] for n in nodes} == {"unix", "tcp", "ssh"}
    assert by_name["ascend-a2"].cards == tuple(range(8)) and by_name["ascend-a2"].kind == "npu"
    assert by_name["npu-sim"].cards == (0, 1) and by_name["npu-sim"].kind == "npu-simulated"
    bad = tmp_path / "nodes.yaml"
    for text, field in [
        ("nodes: [{url: 'http://x'}]", "url"),
        ("nodes: [{url: 'unix:///x', kind: gpu}]", "kind"),
        ("nodes: [{url: 'unix:///x', cards: [0]}]", "cards"),
        ("nodes: [{url: 'unix:///x', colour: red}]", "colour"),
        ("nodes: [{name: a, url: 'unix:///x'}, {name: a, url: 'unix:///y'}]", "unique"),
    ]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=field):
            load_nodes(bad)


def test_nodes_come_from_the_hosts_setting_or_the_nodes_file(tmp_path: Path) -> None:
    from labserver.backends.docker.backend import nodes_from_settings
    from labserver.config import DockerSettings

    nodes = nodes_from_settings(DockerSettings(hosts=["unix:///var/run/docker.sock", "tcp://10.0.0.2:2376"]))
    assert [(n.name, n.url, n.kind) for n in nodes] == [
        ("local", "unix:///var/run/docker.sock", "cpu"),
        ("node2", "tcp://10.0.0.2:2376", "cpu"),
    ]
    assert all(n.cpus == 0 for n in nodes)  # capacity is asked from the engine (docker info) at first use
    from_file = nodes_from_settings(DockerSettings(nodes_file=REPO / "provisioning" / "nodes.example.yaml"))
    assert [n.name for n in from_file] == ["local", "cpu-2", "ascend-a2", "npu-sim"]
