"""Which image and limits an environment gets (``services/provisioning/env_spec.py``): the pure rules, and
``spec_for`` with the real catalog. The real container is checked in
``tests/backends/docker/test_limits_image.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import DockerSettings, Settings
from labserver.content import Lab
from labserver.content.schema import LabSpec
from labserver.models import Attendee
from labserver.services.joining.events import create_event
from labserver.services.provisioning.env_spec import image_conflicts, image_for, limits_for
from labserver.services.provisioning.environments import spec_for

DEFAULT = "labserver/cpu-emu:abc123"


def lab(lab_id: str, **fields: Any) -> Lab:
    raw = {
        "id": lab_id,
        "title": {"en": lab_id},
        "summary": {"en": lab_id},
        "duration_min": 10,
        "steps": [{"id": "s", "title": {"en": "s"}, "file": "s.md", "check": "c.py"}],
        **fields,
    }
    return Lab(LabSpec.model_validate(raw), Path("/nowhere") / lab_id, ())


def test_image_precedence_event_then_lab_then_server() -> None:
    plain, npu = lab("plain"), lab("npu", image="registry:5000/ascend/cann:8.1")
    assert image_for("", [plain], DEFAULT) == DEFAULT  # nobody names one
    assert image_for("", [plain, npu], DEFAULT) == "registry:5000/ascend/cann:8.1"  # the lab's
    assert image_for("event/img:1", [npu], DEFAULT) == "event/img:1"  # the event's wins
    # a lab naming the server default's repository without a tag gets the server's pinned build
    assert image_for("", [lab("a", image="labserver/cpu-emu")], DEFAULT) == DEFAULT
    assert image_for("", [lab("a", image="labserver/cpu-emu:old")], DEFAULT) == "labserver/cpu-emu:old"
    assert image_for("", [lab("a", image="other/img")], DEFAULT) == "other/img"


def test_labs_naming_different_images_are_reported() -> None:
    labs = [lab("a", image="x/one"), lab("b"), lab("c", image="x/two"), lab("d", image="x/one")]
    assert image_conflicts(labs) == ["c: x/two"]
    assert image_conflicts([lab("a"), lab("b")]) == []


def test_server_limits_when_set_apply_to_every_container_else_the_labs_requires() -> None:
    small = lab("small", requires={"cpus": 0.5, "memory_mb": 512})
    big = lab("big", requires={"cpus": 2, "memory_mb": 3072})
    unset = limits_for([small, big], DockerSettings())
    assert (unset.cpus, unset.memory_mb, unset.short) == (2, 3072, ())
    assert (limits_for([], DockerSettings()).cpus, limits_for([], DockerSettings()).memory_mb) == (1.0, 2048)
    room = limits_for([small, big], DockerSettings(cpus=0.5, memory_mb=1024))
    assert (room.cpus, room.memory_mb) == (0.5, 1024)
    assert room.short == ("big: 2 CPU, 3072 MiB",)  # logged for the operator
    roomy = limits_for([small], DockerSettings(cpus=4, memory_mb=8192))
    assert (roomy.cpus, roomy.memory_mb, roomy.short) == (4, 8192, ())


@pytest.mark.parametrize(
    ("docker", "expected"),
    [
        ({}, (1.0, 3072)),  # the shipped labs' requires (sanavideo asks 3072 MiB)
        ({"cpus": 0.5, "memory_mb": 1024}, (0.5, 1024)),  # the operator's room sizing
    ],
)
def test_spec_for_uses_the_documented_precedence(tmp_path: Path, docker: dict, expected: tuple) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", instructor_token="t", docker=DockerSettings(image=DEFAULT, **docker)
    )
    ctx = create_app(settings).state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="t", labs=["getting-started", "sanavideo"], code="SPEC")
        assert event.id is not None
        nobody = Attendee(id=1, event_id=event.id, name="a", token_hash="")
        spec = spec_for(ctx, event, nobody)
        assert (spec.cpus, spec.memory_mb) == expected
        assert spec.image == DEFAULT  # the labs name labserver/cpu-emu: the server's tag of it
        event.image = "mine/img:2"
        assert spec_for(ctx, event, nobody).image == "mine/img:2"
