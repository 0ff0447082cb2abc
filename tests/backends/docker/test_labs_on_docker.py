"""Every lab's solution on the Docker backend: each step's check passes, in grader containers from
the cpu-emu image (the image carries what every lab needs, and the lab's files are read-only there:
sanavideo's deploy check once wrote into its folder and errored only here). The whole self-test
(starter fails each check, every mutant fails its step) runs on Docker for one lab
(getting-started): for the other labs the starter and mutant phases prove the same checkers on the
local backend in tests/labs, and the Docker path is proven once.
`make labs` runs this file beside the local self-tests, on both cores."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from labserver.backends.docker.backend import DockerBackend
from labserver.checks.selftest import run_selftest
from labserver.config import DockerSettings, Settings
from labserver.content import Lab, load_lab
from tests.conftest import REPO

LAB_DIRS = sorted(p for p in (REPO / "labs").iterdir() if (p / "lab.yaml").exists())


@pytest.mark.slow
@pytest.mark.parametrize("lab_dir", LAB_DIRS, ids=[p.name for p in LAB_DIRS])
def test_selftest_on_docker(lab_dir, tmp_path, cpu_emu_image: str) -> None:  # type: ignore[no-untyped-def]
    lab = load_lab(lab_dir)
    assert isinstance(lab, Lab), lab
    settings = Settings(
        data_dir=tmp_path / "data",
        docker=DockerSettings(image=cpu_emu_image, name_prefix=f"lst{uuid.uuid4().hex[:6]}"),
    )

    async def go():  # type: ignore[no-untyped-def]
        backend = DockerBackend(settings)
        try:
            whole = lab.id == "getting-started"
            return await run_selftest(lab, settings=settings, backend=backend, mutants=whole, starter=whole)
        finally:
            await backend.aclose()

    report = asyncio.run(go())
    assert report.ok, "\n".join(report.lines())
