"""The checker protocol end to end: real checker processes through the local backend and the API."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from labserver.app import create_app
from labserver.backends.base import CheckRaw
from labserver.checks.verdict import interpret
from labserver.config import Settings
from labserver.models import CheckRun, CheckStatus
from labserver.services.joining.events import create_event
from tests.conftest import INSTRUCTOR_TOKEN, join

CHECKERS = {
    "no-verdict": "print('I forgot to call result()')\n",
    "hangs": "import time\ntime.sleep(600)\n",
    "floods": "import sys\nchunk = 'x' * 1023 + '\\n'\nfor _ in range(10 * 1024):\n    sys.stdout.write(chunk)\n"
    "from labkit.check import result\nresult(False, 'flooded')\n",
    "crashes": "raise RuntimeError('bug in the checker')\n",
    "disagrees": "import json, os, sys\nos.write(int(os.environ['LAB_RESULT_FD']), json.dumps({'passed': True, 'message': 'x'}).encode())\nsys.exit(1)\n",
    "two-verdicts": 'import json, os, sys\nfd = int(os.environ[\'LAB_RESULT_FD\'])\nos.write(fd, b\'{"passed": false, "message": "a"}\')\nos.write(fd, b\'{"passed": true, "message": "b"}\')\nsys.exit(0)\n',
    "stdout-verdict": 'print(\'{"passed": true, "message": "forged on stdout"}\')\nimport sys\nsys.exit(0)\n',
    # judges attendee code the protocol way: through labkit.check.run_function in a child process
    "judge": textwrap.dedent("""
        from labkit.check import Failure, main, run_function

        def check():
            res = run_function("solution.py", "answer", timeout=20)
            value = res.unwrap()
            if value != 42:
                raise Failure(f"answer() returned {value!r}, expected 42")
            return "answer is 42"

        main(check)
    """),
    # quotes the attendee's file in a table attached to a failed verdict
    "quotes": textwrap.dedent("""
        from pathlib import Path
        from labkit.check import Failure, main, table

        def check():
            rows = [line.split("|") for line in Path("log.txt").read_text().splitlines()]
            table("Your log", ["skill", "why"], rows)
            raise Failure("not yet")

        main(check)
    """),
}

ATTENDEE_CODE = {
    "prints-verdict": "import os, json\nprint(json.dumps({'passed': True, 'message': 'forged'}))\n"
    'for fd in range(3, 64):\n    try:\n        os.write(fd, b\'{"passed": true, "message": "forged"}\')\n'
    "    except OSError:\n        pass\ndef answer():\n    return 0\n",
    "exits-zero-on-import": "import os\nos._exit(0)\n",
    "sys-exit-in-call": "import sys\ndef answer():\n    sys.exit(0)\n",
    "wrong": "def answer():\n    return 41\n",
    "right": "def answer():\n    return 42\n",
}


def make_lab(root: Path, timeout_s: float = 60) -> None:
    lab = root / "protocol"
    (lab / "steps").mkdir(parents=True)
    (lab / "checks").mkdir()
    (lab / "starter").mkdir()
    (lab / "solution").mkdir()
    steps = []
    for i, (name, body) in enumerate(CHECKERS.items(), 1):
        (lab / "checks" / f"{i:02d}_{name.replace('-', '_')}.py").write_text(body)
        (lab / "steps" / f"{i:02d}-{name}.md").write_text(f"# {name}\n")
        to = 3 if name == "hangs" else timeout_s
        steps.append(
            f"  - {{id: {name}, title: {name}, file: steps/{i:02d}-{name}.md, "
            f"check: checks/{i:02d}_{name.replace('-', '_')}.py, timeout_s: {to}}}"
        )
    (lab / "lab.yaml").write_text(
        "id: protocol\ntitle: Protocol\nsummary: s\nduration_min: 5\nsteps:\n" + "\n".join(steps) + "\n"
    )


@pytest.fixture
def proto_client(tmp_path: Path, database_url: str):  # type: ignore[no-untyped-def]
    labs = tmp_path / "labs"
    make_lab(labs)
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=labs,
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
    )
    settings.checks.log_limit_bytes = 64 * 1024
    app = create_app(settings)
    with Session(app.state.ctx.engine) as s:
        create_event(s, title="t", labs=["protocol"], code="TESTCODE")
    with TestClient(app) as client:
        yield client, app


def check(client: TestClient, headers: dict[str, str], step: str) -> dict:
    resp = client.post(f"/api/v1/labs/protocol/steps/{step}/check", headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize(
    "step,status,needle",
    [
        ("no-verdict", "error", "without giving a verdict"),
        ("hangs", "timeout", "did not finish within 3 s"),
        ("crashes", "error", "without giving a verdict"),
        ("disagrees", "error", "disagrees with its verdict"),
        ("two-verdicts", "error", "more than one verdict"),
        ("stdout-verdict", "error", "without giving a verdict"),
    ],
)
def test_broken_checkers_are_errors_never_passes(proto_client, step: str, status: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    client, _app = proto_client
    run = check(client, join(client), step)
    assert run["status"] == status
    assert needle in run["message"]


def test_a_checker_printing_10_mb_is_capped(proto_client) -> None:  # type: ignore[no-untyped-def]
    client, _app = proto_client
    run = check(client, join(client), "floods")
    assert run["status"] == "failed" and run["message"] == "flooded"
    assert run["log_truncated"] is True
    assert len(run["log"]) <= 64 * 1024


@pytest.mark.parametrize(
    "code,status,needle",
    [
        ("prints-verdict", "failed", "returned 0"),
        ("exits-zero-on-import", "failed", ""),
        ("sys-exit-in-call", "failed", ""),
        ("wrong", "failed", "returned 41"),
        ("right", "passed", "answer is 42"),
    ],
)
def test_attendee_code_cannot_forge_a_pass(proto_client, code: str, status: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    client, _app = proto_client
    headers = join(client)
    assert (
        client.put(
            "/api/v1/labs/protocol/files/solution.py", content=ATTENDEE_CODE[code], headers=headers
        ).status_code
        == 200
    )
    run = check(client, headers, "judge")
    assert run["status"] == status, run
    assert needle in run["message"]


def test_result_is_committed_before_it_is_returned(proto_client) -> None:  # type: ignore[no-untyped-def]
    client, app = proto_client
    run = check(client, join(client), "no-verdict")
    with Session(app.state.ctx.engine) as s:
        row = s.exec(select(CheckRun).where(CheckRun.id == run["id"])).one()
    assert row.status == CheckStatus.error and row.finished_at is not None


def test_history_lists_my_runs_newest_first(proto_client) -> None:  # type: ignore[no-untyped-def]
    client, _app = proto_client
    headers = join(client)
    first = check(client, headers, "judge")
    second = check(client, headers, "judge")
    runs = client.get("/api/v1/labs/protocol/steps/judge/runs", headers=headers).json()
    assert [r["id"] for r in runs] == [second["id"], first["id"]]


def test_a_table_quoting_hostile_attendee_text_comes_back_as_plain_text(proto_client) -> None:  # type: ignore[no-untyped-def]
    """The attendee's own text (here markup and a Markdown table) reaches the page as the cells
    of a table, character for character; the page puts each cell in a text node (check.js)."""
    client, _app = proto_client
    headers = join(client)
    hostile = "<script>alert(1)</script>|**accept** <img src=x onerror=alert(2)>\nmtp|| x |"
    assert (
        client.put("/api/v1/labs/protocol/files/log.txt", content=hostile, headers=headers).status_code == 200
    )
    run = check(client, headers, "quotes")
    assert run["status"] == "failed" and run["message"] == "not yet"
    assert run["tables"] == [
        {
            "title": "Your log",
            "columns": ["skill", "why"],
            "rows": [["<script>alert(1)</script>", "**accept** <img src=x onerror=alert(2)>"], ["mtp", ""]],
        }
    ]
    history = client.get("/api/v1/labs/protocol/steps/quotes/runs", headers=headers).json()
    assert history[0]["tables"] == run["tables"]


@pytest.mark.parametrize(
    "raw,tables",
    [
        (b'"x"', "not a list"),
        (b'[{"title": "t", "columns": "ab", "rows": []}]', "no list of columns"),
        (b'[{"title": "t", "columns": ["a"], "rows": [[{"html": "<b>"}]]}]', "not text or a number"),
        (b'[{"title": 3, "columns": ["a"], "rows": []}]', "with a title"),
    ],
)
def test_a_malformed_table_is_a_checker_error(raw: bytes, tables: str) -> None:
    verdict = interpret(
        CheckRaw(1, b'{"passed": false, "message": "no", "tables": ' + raw + b"}", b"", False, False, 0.1), 5
    )
    assert verdict.status == CheckStatus.error and tables in verdict.message


def test_tables_are_capped() -> None:
    import json

    big = {"title": "t" * 1000, "columns": [f"c{i}" for i in range(30)], "rows": [["x" * 1000] * 30] * 500}
    body = json.dumps({"passed": True, "message": "ok", "tables": [big] * 9}).encode()
    verdict = interpret(CheckRaw(0, body, b"", False, False, 0.1), 5)
    assert verdict.status == CheckStatus.passed and len(verdict.tables) == 4
    t = verdict.tables[0]
    assert len(t["columns"]) == 12 and len(t["rows"]) == 100 and len(t["title"]) == 300
    assert all(len(row) == 12 and all(len(c) == 300 for c in row) for row in t["rows"])


@pytest.mark.parametrize(
    "raw,status",
    [
        (CheckRaw(0, b'{"passed": true, "message": "ok"}', b"", False, False, 0.1), CheckStatus.passed),
        (CheckRaw(1, b'{"passed": false, "message": "no"}', b"", False, False, 0.1), CheckStatus.failed),
        (CheckRaw(0, b'{"passed": false, "message": "no"}', b"", False, False, 0.1), CheckStatus.error),
        (CheckRaw(-9, b'{"passed": true, "message": "ok"}', b"", False, False, 0.1), CheckStatus.error),
        (CheckRaw(0, b'{"passed": "yes"}', b"", False, False, 0.1), CheckStatus.error),
        (CheckRaw(0, b'{"passed": true, "metrics": {"x": NaN}}', b"", False, False, 0.1), CheckStatus.error),
        (CheckRaw(0, b"[1]", b"", False, False, 0.1), CheckStatus.error),
        (CheckRaw(None, b"", b"", False, True, 5), CheckStatus.timeout),
    ],
)
def test_interpret_maps_exit_and_verdict(raw: CheckRaw, status: CheckStatus) -> None:
    assert interpret(raw, 5).status == status


@pytest.mark.parametrize(
    "cpu,expected",
    [
        ("1.25", 1.25),
        ("0", 0.0),
        ("3", 3.0),
        ("-1", None),
        ("true", None),
        ('"2"', None),
        ("1e999", None),  # JSON's way to say infinity
        ("null", None),
    ],
)
def test_the_verdicts_cpu_s_is_a_figure_kept_when_valid_else_ignored(
    cpu: str, expected: float | None
) -> None:
    body = b'{"passed": true, "message": "ok", "cpu_s": ' + cpu.encode() + b"}"
    verdict = interpret(CheckRaw(0, body, b"", False, False, 0.1), 5)
    assert verdict.status == CheckStatus.passed  # never judged by it
    assert verdict.cpu_s == expected
    no_cpu = interpret(CheckRaw(1, b'{"passed": false, "message": "no"}', b"", False, False, 0.1), 5)
    assert no_cpu.status == CheckStatus.failed and no_cpu.cpu_s is None


def test_a_check_run_stores_what_its_checker_says_it_cost(proto_client) -> None:  # type: ignore[no-untyped-def]
    client, app = proto_client
    headers = join(client)
    burns = "import time\n\ndef answer():\n    end = time.process_time() + 0.5\n    while time.process_time() < end:\n        pass\n    return 42\n"
    put = client.put("/api/v1/labs/protocol/files/solution.py", content=burns, headers=headers)
    assert put.status_code == 200
    run = check(client, headers, "judge")
    assert run["status"] == "passed", run
    # the attendee child it ran burnt 0.5 CPU-s: the checker's report includes its children
    assert run["cpu_s"] is not None and run["cpu_s"] >= 0.5
    with Session(app.state.ctx.engine) as s:
        row = s.exec(select(CheckRun).where(CheckRun.id == run["id"])).one()
    assert row.cpu_s == pytest.approx(run["cpu_s"], abs=1e-3)
