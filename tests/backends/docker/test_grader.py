"""Checks cannot be forged from the attendee's container or workspace (real engine, real lab).

Every attack below runs against step 4 of ``getting-started`` with the *starter* rmsnorm.py, whose
honest verdict is "failed". Whatever the attack does, the verdict must not become "passed"."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labserver.backends.base import CheckRequest, EnvRef, LabSeed
from labserver.backends.docker.backend import DockerBackend
from labserver.checks.verdict import interpret
from labserver.models import CheckStatus

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "labs" / "getting-started"
CHECKER = LAB / "checks" / "04_implement_rmsnorm.py"
PASS = json.dumps({"passed": True, "message": "forged", "hints": [], "metrics": {}})

FAKE_LABKIT_CHECK = f"""
import os, sys
def _win(*a, **k):
    fd = int(os.environ.get("LAB_RESULT_FD", "1"))
    os.write(fd, {PASS!r}.encode())
    os._exit(0)
main = passed = result = failed = run_function = expect_close = expect_equal = msg = _win
class Failure(Exception): pass
_win()
"""

SITECUSTOMIZE = f"""
import os
fd = os.environ.get("LAB_RESULT_FD")
if fd:
    os.write(int(fd), {PASS!r}.encode())
    os._exit(0)
"""

EVIL_SOLUTION = f"""
import glob, os, signal
def rms_norm(x, w, eps):
    msg = {PASS!r}.encode()
    for fd in range(3, 64):                      # inherited descriptors
        try: os.write(fd, msg)
        except OSError: pass
    for path in glob.glob("/proc/*/fd/*"):       # other processes' pipes (the result channel)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK); os.write(fd, msg); os.close(fd)
        except OSError: pass
    for path in ("/opt/labserver/out/result.json", "/opt/labserver/key/key"):
        try:
            with open(path, "w") as f: f.write(msg.decode())
        except OSError: pass
    return x, x                                  # wrong answer
"""


def request() -> CheckRequest:
    env = {
        "LAB_ID": "getting-started",
        "LAB_STEP": "implement-rmsnorm",
        "LAB_DEVICE": "cpu-emu",
        "LAB_RUN_ID": "t1",
        "LAB_LANG": "en",
    }
    return CheckRequest("getting-started", "implement-rmsnorm", CHECKER, env, timeout_s=120)


def verdict(backend: DockerBackend, ref: EnvRef) -> tuple[CheckStatus, str]:
    async def go() -> tuple[CheckStatus, str]:
        raw = await backend.run_check(ref, request())
        v = interpret(raw, 120)
        return v.status, f"{v.message} | log: {raw.log[-400:]!r}"

    return asyncio.run(go())


@pytest.fixture
def env(docker_backend: DockerBackend, make_spec: Any) -> EnvRef:
    spec = make_spec(labs=(LabSeed("getting-started", LAB / "starter"),), cpus=1.0, memory_mb=1024)
    return asyncio.run(docker_backend.create(spec))


def write(backend: DockerBackend, ref: EnvRef, files: dict[str, str]) -> None:
    async def go() -> None:
        for path, text in files.items():
            await backend.write_file(ref, path, text.encode())

    asyncio.run(go())


def test_honest_results_fail_then_pass(docker_backend: DockerBackend, env: EnvRef) -> None:
    status, detail = verdict(docker_backend, env)
    assert status == CheckStatus.failed, detail
    write(docker_backend, env, {"getting-started/rmsnorm.py": (LAB / "solution" / "rmsnorm.py").read_text()})
    status, detail = verdict(docker_backend, env)
    assert status == CheckStatus.passed, detail


def test_fake_labkit_in_the_workspace_does_not_pass(docker_backend: DockerBackend, env: EnvRef) -> None:
    fakes = {}
    for root in ("getting-started", "", "getting-started/checks"):
        prefix = f"{root}/" if root else ""
        fakes[f"{prefix}labkit/__init__.py"] = "from .check import *\n"
        fakes[f"{prefix}labkit/check/__init__.py"] = FAKE_LABKIT_CHECK
        fakes[f"{prefix}labkit/check.py"] = FAKE_LABKIT_CHECK
        fakes[f"{prefix}torch/__init__.py"] = FAKE_LABKIT_CHECK
    write(docker_backend, env, fakes)
    status, detail = verdict(docker_backend, env)
    assert status == CheckStatus.failed, detail


def test_sitecustomize_in_the_workspace_does_not_pass(docker_backend: DockerBackend, env: EnvRef) -> None:
    files = {}
    for root in ("getting-started/", ""):
        files[f"{root}sitecustomize.py"] = SITECUSTOMIZE
        files[f"{root}usercustomize.py"] = SITECUSTOMIZE
        files[f"{root}evil.pth"] = "import sitecustomize\n"
    write(docker_backend, env, files)
    status, detail = verdict(docker_backend, env)
    assert status == CheckStatus.failed, detail


def test_modified_checker_copy_does_not_pass(docker_backend: DockerBackend, env: EnvRef) -> None:
    always_pass = (
        f"import os, sys\nos.write(int(os.environ['LAB_RESULT_FD']), {PASS!r}.encode())\nsys.exit(0)\n"
    )
    write(
        docker_backend,
        env,
        {
            "getting-started/checks/04_implement_rmsnorm.py": always_pass,
            "getting-started/04_implement_rmsnorm.py": always_pass,
            "checks/04_implement_rmsnorm.py": always_pass,
        },
    )
    status, detail = verdict(docker_backend, env)
    assert status == CheckStatus.failed, detail


def test_attendee_code_attacking_the_result_channel_does_not_pass(
    docker_backend: DockerBackend, env: EnvRef
) -> None:
    write(docker_backend, env, {"getting-started/rmsnorm.py": EVIL_SOLUTION})
    status, detail = verdict(docker_backend, env)
    assert status in (CheckStatus.failed, CheckStatus.error), detail


def test_background_process_rewriting_files_does_not_pass(docker_backend: DockerBackend, env: EnvRef) -> None:
    write(
        docker_backend,
        env,
        {
            ".attack/labkit_check.py": FAKE_LABKIT_CHECK,
            ".attack/sitecustomize.py": SITECUSTOMIZE,
            ".attack/pass.json": PASS,
            ".attack/rewriter.sh": (
                "cd /workspace/getting-started\n"
                "mkdir -p labkit/check checks\n"
                "while :; do\n"
                "  cp /workspace/.attack/labkit_check.py labkit/check/__init__.py\n"
                "  cp /workspace/.attack/sitecustomize.py sitecustomize.py\n"
                "  cp /workspace/.attack/sitecustomize.py checks/04_implement_rmsnorm.py\n"
                "  for f in /proc/*/fd/*; do cat /workspace/.attack/pass.json > $f 2>/dev/null; done\n"
                "  sleep 0.05\n"
                "done\n"
            ),
        },
    )

    async def go() -> tuple[CheckStatus, str]:
        await docker_backend.exec(
            env, ["sh", "-c", "setsid sh /workspace/.attack/rewriter.sh >/dev/null 2>&1 </dev/null &"]
        )
        await asyncio.sleep(0.5)
        ps = await docker_backend.exec(env, ["ps", "-eo", "args"])
        assert b"rewriter.sh" in ps.stdout, f"the background rewriter runs: {ps.stdout!r}"
        raw = await docker_backend.run_check(env, request())
        v = interpret(raw, 120)
        return v.status, f"{v.message} | log: {raw.log[-400:]!r}"

    status, detail = asyncio.run(go())
    assert status in (CheckStatus.failed, CheckStatus.error), detail
