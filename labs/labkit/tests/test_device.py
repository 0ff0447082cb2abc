"""labkit.device: CPU emulation here, and the NPU branch through a fake torch_npu module."""

from __future__ import annotations

import json
import sys
import types

import pytest
from labkit import device


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("LABKIT_DEVICE", "LABKIT_PROFILE", "ASCEND_RT_VISIBLE_DEVICES", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _fake_torch_npu(monkeypatch, *, available=True, count=2, name="Ascend910B2"):
    api = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: count,
        get_device_name=lambda i: f"{name}",
    )
    fake = types.ModuleType("torch_npu")
    fake.__version__ = "2.13.0.post-fake"
    fake.npu = api
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    return fake


def test_cpu_emulation_without_torch_npu(clean_env):
    clean_env.setitem(sys.modules, "torch_npu", None)  # import torch_npu -> ImportError
    info = device.get_device()
    assert (info.kind, info.torch_device, info.profile, info.is_npu) == ("cpu-emu", "cpu", "910B", False)
    assert "torch_npu is not importable" in info.reason
    d = device.describe()
    assert d["kind"] == "cpu-emu" and d["torch_npu"] is None and d["profile"] == "910B"
    assert d["torch"].startswith("2.13")
    json.dumps(d)


def test_forced_cpu_and_profile_override_despite_fake_torch_npu(clean_env):
    _fake_torch_npu(clean_env)
    clean_env.setenv("LABKIT_DEVICE", "cpu")
    clean_env.setenv("LABKIT_PROFILE", "950PR")
    info = device.get_device()
    assert (info.kind, info.profile) == ("cpu-emu", "950PR")
    assert "950PR" in info.name


def test_fake_torch_npu_is_chosen_with_logical_and_physical_ids(clean_env):
    _fake_torch_npu(clean_env, count=2, name="Ascend910B2")
    clean_env.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,6")
    info = device.get_device()
    assert (info.kind, info.torch_device, info.index, info.physical_id) == ("npu", "npu:0", 0, 4)
    assert (info.name, info.profile) == ("Ascend910B2", "910B")
    clean_env.setenv("LABKIT_DEVICE", "npu:1")
    info = device.get_device()
    assert (info.torch_device, info.physical_id) == ("npu:1", 6)
    d = device.describe()
    assert d["torch_npu"] == "2.13.0.post-fake" and d["kind"] == "npu" and d["visible_devices"] == "4,6"
    clean_env.setenv("LABKIT_DEVICE", "auto")
    clean_env.setenv("LOCAL_RANK", "1")
    assert device.get_device().torch_device == "npu:1"


def test_fake_torch_npu_profile_guess(clean_env):
    _fake_torch_npu(clean_env, name="Ascend910_9382")
    assert device.get_device().profile == "A3"
    _fake_torch_npu(clean_env, name="Ascend950PR")
    assert device.get_device().profile == "950PR"


def test_fake_torch_npu_without_card_falls_back_or_raises(clean_env):
    _fake_torch_npu(clean_env, available=False)
    info = device.get_device()
    assert info.kind == "cpu-emu" and "no NPU is available" in info.reason
    clean_env.setenv("LABKIT_DEVICE", "npu")
    with pytest.raises(device.DeviceUnavailable, match="no NPU is available"):
        device.get_device()
    _fake_torch_npu(clean_env, count=1)
    clean_env.setenv("LABKIT_DEVICE", "npu:3")
    with pytest.raises(device.DeviceUnavailable, match="sees 1 NPU"):
        device.get_device()
    clean_env.setenv("LABKIT_DEVICE", "gpu")
    with pytest.raises(device.DeviceUnavailable, match="use cpu, npu"):
        device.get_device()


def test_visible_devices_parsing_stops_at_first_invalid():
    assert device.visible_devices("1,2,3") == [1, 2, 3]
    assert device.visible_devices("1,x,3") == [1]
    assert device.visible_devices("") == []
