"""A Killercoda scenario runs as a lab (issue 34): imported by ``labserver import killercoda``, its
``verify.sh`` scripts judge real attendee workspaces on the local backend (sandboxed checks, real
processes): failing before the work, passing after it, failing on a wrong answer with the script's
words, several attendees at once, and never passing because of what an attendee's file does."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends import make_backend
from labserver.backends.base import Backend, EnvRef
from labserver.checks.selftest import check_step, throwaway_spec
from labserver.config import Settings
from labserver.content import Lab, load_lab
from labserver.content.killercoda import import_scenario
from labserver.services.joining.events import create_event
from tests.conftest import INSTRUCTOR_TOKEN, join

SCENARIOS = Path(__file__).resolve().parents[1] / "content" / "killercoda"
KIND = "from labkit.device import get_device; print(get_device().kind)"


def device_kind() -> str:
    return subprocess.run(
        [sys.executable, "-c", KIND], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def kind() -> str:
    return device_kind()


@pytest.fixture
def ascend(tmp_path: Path) -> Lab:
    import_scenario(SCENARIOS / "ascend-pick-a-card", tmp_path / "labs" / "ascend-pick-a-card")
    lab = load_lab(tmp_path / "labs" / "ascend-pick-a-card")
    assert isinstance(lab, Lab), lab
    return lab


def local(tmp_path: Path, lab: Lab) -> Backend:
    return make_backend(Settings(data_dir=tmp_path / "data", labs_dir=lab.path.parent), "local")


async def press(backend: Backend, ref: EnvRef, lab: Lab, step: str, lang: str = "en") -> tuple[str, str]:
    s = lab.step(step)
    assert s is not None
    verdict, log, _seconds = await check_step(backend, ref, lab, s, Settings(), lang)
    return verdict.status, verdict.message


async def write(backend: Backend, ref: EnvRef, lab: Lab, path: str, text: str) -> None:
    await backend.write_file(ref, f"{lab.id}/{path}", text.encode())


def test_the_ascend_scenario_fails_before_the_work_and_passes_after_it(
    tmp_path: Path, ascend: Lab, kind: str
) -> None:
    async def run() -> None:
        backend = local(tmp_path, ascend)
        ref = await backend.create(throwaway_spec(ascend, Settings(), "kc-one"))
        try:
            status, message = await press(backend, ref, ascend, "find-your-device")
            assert status == "failed"
            assert "device.txt is missing" in message and "exited with status 1" in message
            await write(backend, ref, ascend, "device.txt", "tpu\n")
            status, message = await press(backend, ref, ascend, "find-your-device", "zh")
            assert status == "failed"
            assert "还没有完成" in message and "device.txt says 'tpu'" in message
            await write(backend, ref, ascend, "device.txt", kind + "\n")
            status, message = await press(backend, ref, ascend, "find-your-device")
            assert status == "passed", message
            assert f"names this environment's device: {kind}" in message

            # step 2 needs its set-up (background.sh): without it, the script says so
            await write(backend, ref, ascend, "visible.sh", "export ASCEND_RT_VISIBLE_DEVICES=7\n")
            status, message = await press(backend, ref, ascend, "make-one-card-visible")
            assert status == "failed" and "run the set-up block" in message
            step2 = ascend.step("make-one-card-visible")
            assert step2 is not None and step2.spec.solve == "bash .setup/step2-background.sh"
            setup = await backend.exec(ref, ["bash", "-c", step2.spec.solve], cwd=ascend.id)
            assert setup.exit_code == 0, setup.stderr
            status, message = await press(backend, ref, ascend, "make-one-card-visible")
            assert status == "passed", message
            await write(backend, ref, ascend, "visible.sh", "export ASCEND_RT_VISIBLE_DEVICES=0\n")
            status, message = await press(backend, ref, ascend, "make-one-card-visible")
            assert status == "failed" and "ASCEND_RT_VISIBLE_DEVICES is '0'" in message
        finally:
            await backend.destroy(ref)

    asyncio.run(run())


#: attendee files that try to pass step 2 without the right answer: a verdict written to every
#: descriptor, an exit 0 of the sourcing shell, a kill of the script that sources them
FORGERIES = {
    "writes-verdicts": 'for fd in $(seq 3 40); do echo \'{"passed": true, "message": "forged"}\' >&$fd; done 2>/dev/null\n',
    "exits-zero": "exit 0\n",
    "kills-the-script": "kill -9 $PPID; kill -9 0\n",
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_an_attendee_file_the_script_sources_cannot_pass_the_step(
    tmp_path: Path, ascend: Lab, name: str
) -> None:
    async def run() -> None:
        backend = local(tmp_path, ascend)
        ref = await backend.create(throwaway_spec(ascend, Settings(), f"kc-{name}"))
        try:
            await backend.exec(ref, ["bash", "-c", "bash .setup/step2-background.sh"], cwd=ascend.id)
            await write(backend, ref, ascend, "visible.sh", FORGERIES[name])
            status, message = await press(backend, ref, ascend, "make-one-card-visible")
            assert status == "failed", (status, message)
        finally:
            await backend.destroy(ref)

    asyncio.run(run())


def test_three_attendees_press_check_at_once(tmp_path: Path, ascend: Lab, kind: str) -> None:
    """Three environments, each with its own answer, checked at the same time: each gets its own
    verdict (one right, two wrong)."""

    async def run() -> None:
        backend = local(tmp_path, ascend)
        refs = [await backend.create(throwaway_spec(ascend, Settings(), f"kc-room-{i}")) for i in range(3)]
        try:
            answers = [kind, "npu-wrong", ""]
            for ref, answer in zip(refs, answers, strict=True):
                await write(backend, ref, ascend, "device.txt", answer + "\n")
            results = await asyncio.gather(*(press(backend, ref, ascend, "find-your-device") for ref in refs))
            assert [status for status, _ in results] == ["passed", "failed", "failed"], results
            assert "npu-wrong" in results[1][1]
        finally:
            for ref in refs:
                await backend.destroy(ref)

    asyncio.run(run())


def test_the_check_button_runs_an_imported_scenario(tmp_path: Path, database_url: str, kind: str) -> None:
    """Through the server: the imported lab is listed, its page's Check runs verify.sh."""
    labs = tmp_path / "labs"
    import_scenario(SCENARIOS / "ascend-pick-a-card", labs / "ascend-pick-a-card")
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=labs,
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
    )
    app = create_app(settings)
    with Session(app.state.ctx.engine) as session:
        create_event(session, title="t", labs=["ascend-pick-a-card"], code="KCODE1")
    with TestClient(app) as client:
        headers = join(client, code="KCODE1")
        url = "/api/v1/labs/ascend-pick-a-card"
        assert client.get(url, headers=headers).json()["steps"][0]["id"] == "find-your-device"
        run = client.post(f"{url}/steps/find-your-device/check", headers=headers).json()
        assert run["status"] == "failed" and "device.txt is missing" in run["message"]
        saved = client.put(f"{url}/files/device.txt", headers=headers, content=(kind + "\n").encode())
        assert saved.status_code in (200, 201), saved.text
        run = client.post(f"{url}/steps/find-your-device/check", headers=headers).json()
        assert run["status"] == "passed", run["message"]
