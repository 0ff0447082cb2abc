"""Run one step's checker the way the server does (DESIGN's checker protocol): its verdict comes
through ``LAB_RESULT_FD``, a pipe this process reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def run_checker(
    checker: Path, cwd: Path, env: Mapping[str, str], *, timeout: float = 120, isolated: bool = True
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """(the verdict, the finished process) of ``checker`` run in ``cwd`` with ``env`` plus
    ``LAB_RESULT_FD``; ``isolated`` runs ``python -I``."""
    read, write = os.pipe()
    try:
        proc = subprocess.run(
            [sys.executable, *(["-I"] if isolated else []), str(checker)],
            cwd=cwd,
            env={**env, "LAB_RESULT_FD": str(write)},
            pass_fds=(write,),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as fh:
        verdict = json.loads(fh.read())
    return verdict, proc
