"""Issue 13 item 4 (checkers): step 5 of getting-started reruns ``measure.py``; an attendee who edits
their copy to print a made-up figure (and writes that figure into metric.txt) must not pass. The
checker runs the lab's trusted ``starter/measure.py``, so only the real figure passes."""

from __future__ import annotations

import re
import subprocess
import sys

from fastapi.testclient import TestClient

from tests.conftest import REPO, join

LAB = "getting-started"
FORGED_MEASURE = b'print("layers = 4")\nprint("decode_step_ms = 1.0000")\n'


def _check(client: TestClient, headers: dict[str, str]) -> dict:
    resp = client.post(f"/api/v1/labs/{LAB}/steps/read-metric/check", headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_forged_measure_py_cannot_pass(client: TestClient, event) -> None:  # type: ignore[no-untyped-def]
    me = join(client, "Mallory")
    for path, data in (("measure.py", FORGED_MEASURE), ("metric.txt", b"1.0\n")):
        assert client.put(f"/api/v1/labs/{LAB}/files/{path}", content=data, headers=me).status_code == 200
    run = _check(client, me)
    assert run["status"] == "failed", run
    # the real figure (what the untouched starter prints) still passes, whatever measure.py says
    out = subprocess.run(
        [sys.executable, str(REPO / "labs" / LAB / "starter" / "measure.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    real = re.search(r"^decode_step_ms = ([0-9.]+)$", out, re.M)
    assert real is not None
    client.put(f"/api/v1/labs/{LAB}/files/metric.txt", content=real.group(1).encode(), headers=me)
    assert _check(client, me)["status"] == "passed"
