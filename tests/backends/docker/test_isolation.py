"""One attendee's fork bomb, memory hog and disk filler leave another attendee working."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from labserver.backends.base import CheckRequest, EnvState, backoff
from labserver.backends.docker.backend import DockerBackend
from labserver.checks.verdict import interpret
from labserver.models import CheckStatus

pytestmark = pytest.mark.docker

CHECKER = """
import json, os, sys
ok = open("answer.txt").read().strip() == "42"
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": ok, "message": "ok" if ok else "no"}).encode())
sys.exit(0 if ok else 1)
"""

ATTACKS = {
    "memory-hog": ["python", "-c", "x = []\nwhile True: x.append(bytearray(50 * 2**20))"],
    "tmp-filler": ["dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M"],
    "workspace-filler": ["dd", "if=/dev/zero", "of=/workspace/fill", "bs=1M", "count=300"],
    "fork-bomb": ["bash", "-c", "bomb() { bomb | bomb & }; bomb"],  # last: see below
}


def test_noisy_neighbour_cannot_take_the_machine(
    docker_backend: DockerBackend, make_spec: Any, tmp_path: Path
) -> None:
    checker = tmp_path / "check.py"
    checker.write_text(CHECKER)

    async def go() -> None:
        noisy, victim = await docker_backend.create(make_spec()), await docker_backend.create(make_spec())
        await docker_backend.write_file(victim, "lab1/answer.txt", b"42\n")
        # the fork bomb starts last: once it holds every pid, the other attacks could not even start
        attacks = []
        for name, argv in ATTACKS.items():
            if name == "fork-bomb":
                await asyncio.sleep(1.5)
            attacks.append(asyncio.ensure_future(docker_backend.exec(noisy, argv, timeout=25)))
        await asyncio.sleep(4)  # let them bite
        # the victim: a check and a terminal still work while the neighbour misbehaves
        raw = await docker_backend.run_check(victim, CheckRequest("lab1", "s", checker, {}, timeout_s=90))
        assert interpret(raw, 90).status == CheckStatus.passed, raw
        term = await docker_backend.terminal(victim, 80, 24)
        await term.write(b"echo alive-$((20+22))\n")
        buf = b""
        while b"alive-42" not in buf:
            buf += await asyncio.wait_for(term.read(), 30)
        await term.close()
        results = dict(zip(ATTACKS, await asyncio.gather(*attacks), strict=True))
        # each attack was contained inside the noisy container
        assert results["memory-hog"].exit_code == 137 or results["memory-hog"].timed_out, results[
            "memory-hog"
        ]
        assert b"No space left" in results["tmp-filler"].stderr or results["tmp-filler"].exit_code != 0
        assert (
            b"fork" in results["fork-bomb"].stderr
            or b"Resource temporarily unavailable" in (results["fork-bomb"].stderr)
            or results["fork-bomb"].timed_out
        ), results["fork-bomb"]

        # and the noisy container itself comes back once its attacks are over
        async def usable() -> None:
            res = await docker_backend.exec(noisy, ["true"], timeout=10)
            assert res.exit_code == 0, res

        await backoff(usable, attempts=10, first=0.5, factor=1.5, retry_on=(AssertionError, Exception))
        assert (await docker_backend.status(noisy)).state == EnvState.ready

    asyncio.run(go())
