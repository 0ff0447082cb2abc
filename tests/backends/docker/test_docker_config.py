"""Pure config builders: no daemon needed."""

from __future__ import annotations

from labserver.backends.base import EnvSpec
from labserver.backends.docker import config as dc
from labserver.backends.docker.scheduler import Node, Placement
from labserver.config import DockerSettings


def spec(**kw: object) -> EnvSpec:
    base: dict[str, object] = {
        "env_id": "ev3-at7",
        "event_id": 3,
        "attendee_id": 7,
        "cpus": 1.5,
        "memory_mb": 1536,
        "pids": 200,
    }
    base.update(kw)
    return EnvSpec(**base)  # type: ignore[arg-type]


def test_names_are_deterministic_escaped_and_reversible() -> None:
    assert dc.container_name("ev3-at7") == "labserver-ev3-at7"
    assert dc.volume_name("ev3-at7") == "labserver-ws-ev3-at7"
    for raw in ["ev3-at7", "Ada Lovelace/../x", "a_b", "a_5f", "中文", "x.y-z"]:
        name = dc.container_name(raw)
        assert all(c.isalnum() and c.isascii() or c in "._-" for c in name), name
        assert dc.env_id_from_name("/" + name) == raw
    assert dc.escape("a_b") != dc.escape("a_5fb")  # injective: '_' itself is escaped
    assert dc.env_id_from_name("labserver-warm-ev1-x") is None
    assert dc.env_id_from_name("something-else") is None


def test_container_config_is_hardened_and_limited() -> None:
    cfg = dc.make_container_config(spec(), DockerSettings())
    assert cfg["name"] == "labserver-ev3-at7"
    assert cfg["user"] == "1000:1000"
    assert cfg["cap_drop"] == ["ALL"]
    assert cfg["security_opt"] == ["no-new-privileges"]
    assert cfg["init"] is True and cfg["read_only"] is True
    assert cfg["network_mode"] == "none"
    assert cfg["nano_cpus"] == 1_500_000_000
    assert cfg["mem_limit"] == cfg["memswap_limit"] == "1536m"
    assert cfg["pids_limit"] == 200
    assert cfg["cpu_shares"] == 256  # a quarter weight: the server stays answered on a busy host
    assert set(cfg["tmpfs"]) == {"/tmp", "/home/lab"}
    assert cfg["volumes"] == {"labserver-ws-ev3-at7": {"bind": "/workspace", "mode": "rw"}}
    assert cfg["working_dir"] == "/workspace"
    assert cfg["devices"] == []
    labels = cfg["labels"]
    assert labels["labserver.env_id"] == "ev3-at7"
    assert labels["labserver.event"] == "3" and labels["labserver.attendee"] == "7"
    assert labels["labserver.version"] and labels["labserver.role"] == "env"
    assert cfg["environment"]["LAB_DEVICE"] == "cpu-emu"


def test_network_only_when_the_lab_asks() -> None:
    assert dc.make_container_config(spec(network=True), DockerSettings())["network_mode"] == "bridge"


def test_image_defaults_to_settings() -> None:
    assert dc.make_container_config(spec(image=""), DockerSettings(image="x/y:1"))["image"] == "x/y:1"
    assert dc.make_container_config(spec(image="a/b"), DockerSettings(image="x/y:1"))["image"] == "a/b"


def test_npu_card_gets_its_devices_driver_mounts_and_visible_devices() -> None:
    node = Node("npu1", "tcp://npu1:2376", kind="npu", cpus=64, memory_mb=512_000, cards=(0, 1, 2, 3))
    cfg = dc.make_container_config(spec(device="npu"), DockerSettings(), Placement(node, 2))
    assert cfg["devices"] == [
        "/dev/davinci2:/dev/davinci2:rwm",
        "/dev/davinci_manager:/dev/davinci_manager:rwm",
        "/dev/devmm_svm:/dev/devmm_svm:rwm",
        "/dev/hisi_hdc:/dev/hisi_hdc:rwm",
    ]
    for mount in (
        "/usr/local/Ascend/driver/lib64",
        "/usr/local/bin/npu-smi",
        "/usr/local/dcmi",
        "/usr/local/Ascend/driver/version.info",
        "/etc/ascend_install.info",
    ):
        assert cfg["volumes"][mount] == {"bind": mount, "mode": "ro"}
    env = cfg["environment"]
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0"  # the container sees its one card as device 0
    assert env["LAB_DEVICE"] == "npu:0" and env["LABSERVER_CARD"] == "2"
    assert cfg["labels"]["labserver.card"] == "2" and cfg["labels"]["labserver.node"] == "npu1"
    physical = Node("npu2", "tcp://npu2:2376", kind="npu", cards=(5,), visible_devices="physical")
    env2 = dc.make_container_config(spec(), DockerSettings(), Placement(physical, 5))["environment"]
    assert env2["ASCEND_RT_VISIBLE_DEVICES"] == "5"


def test_npu_simulated_card_has_no_device_files() -> None:
    node = Node("sim", "unix:///var/run/docker.sock", kind="npu-simulated", cards=(0, 1))
    cfg = dc.make_container_config(spec(device="npu"), DockerSettings(), Placement(node, 1))
    assert cfg["devices"] == []
    assert list(cfg["volumes"]) == ["labserver-ws-ev3-at7"]
    assert cfg["labels"]["labserver.card"] == "1"
    assert cfg["environment"]["LAB_DEVICE"] == "cpu-emu"
    assert "ASCEND_RT_VISIBLE_DEVICES" not in cfg["environment"]


def test_grader_config_sees_the_workspace_read_only_without_network() -> None:
    cfg = dc.make_grader_config(
        image="img",
        volume="labserver-ws-x",
        lab_id="lab1",
        env={"LAB_ID": "lab1"},
        placement=None,
        cpus=1,
        memory_mb=1024,
        name="g",
        env_id="x",
    )
    assert cfg["volumes"] == {"labserver-ws-x": {"bind": "/workspace", "mode": "ro"}}
    assert cfg["network_mode"] == "none"
    assert cfg["user"] == "1000:1000" and cfg["cap_drop"] == ["ALL"]
    assert cfg["security_opt"] == ["no-new-privileges"]
    assert cfg["labels"]["labserver.role"] == "grader"
    assert cfg["command"] == ["python3", "-I", "/opt/labserver/grader/runner.py"]
    assert "restart_policy" not in cfg


def test_tmpfs_stays_well_below_the_memory_limit() -> None:
    cfg = dc.make_container_config(spec(memory_mb=2048), DockerSettings())
    assert cfg["tmpfs"]["/tmp"].split("size=")[1].startswith("512m")
    assert cfg["tmpfs"]["/home/lab"].split("size=")[1].startswith("128m")
