"""Shared fixtures of labkit's tests: ``run_checker`` runs a checker script as the server does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class CheckerRun:
    exit_code: int
    verdicts: list[dict]
    raw: bytes
    stdout: str
    stderr: str


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


@pytest.fixture
def run_checker(tmp_path: Path):
    """Run a checker script the way the server does: ``python -I checker.py`` with cwd = the lab
    folder, LAB_* variables and a real pipe whose write end number is in LAB_RESULT_FD."""

    def run(
        checker: str,
        files: dict[str, str] | None = None,
        *,
        lang: str = "en",
        result_fd: bool = True,
        timeout: float = 120,
    ) -> CheckerRun:
        lab = tmp_path / "lab"
        lab.mkdir(exist_ok=True)
        _write(lab, files or {})
        checks = tmp_path / "checks"
        checks.mkdir(exist_ok=True)
        script = checks / "01_step.py"
        script.write_text(textwrap.dedent(checker))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAB")}
        env.update(
            LAB_ID="demo",
            LAB_STEP="step",
            LAB_DIR=str(lab),
            LAB_DEVICE="cpu-emu",
            LAB_RUN_ID="run-secret-123",
            LAB_LANG=lang,
        )
        r, w = os.pipe()
        try:
            if result_fd:
                env["LAB_RESULT_FD"] = str(w)
            proc = subprocess.Popen(
                [sys.executable, "-I", str(script)],
                cwd=lab,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(w,) if result_fd else (),
            )
            os.close(w)
            w = -1
            out, err = proc.communicate(timeout=timeout)
            chunks = []
            while chunk := os.read(r, 65536):
                chunks.append(chunk)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        raw = b"".join(chunks)
        verdicts = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
        return CheckerRun(proc.returncode, verdicts, raw, out.decode(), err.decode())

    return run
