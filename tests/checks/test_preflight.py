"""``labserver rehearse EVENT`` on the local backend: K environments at once, every lab's solution
checks run in each (real checker processes), start and check times per lab reported, every
environment removed after, also when a step does not pass with its solution."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from labserver.app import create_app
from labserver.cli.main import app as cli
from labserver.config import Settings
from labserver.services.joining.events import create_event

CHECKER = """import json, os, pathlib, sys
ok = pathlib.Path("answer.txt").is_file() and pathlib.Path("answer.txt").read_text() == "42\\n"
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": ok, "message": "ok" if ok else "no answer"}).encode())
sys.exit(0 if ok else 1)
"""


def make_lab(root: Path, lab_id: str, solution: str) -> None:
    lab = root / lab_id
    for sub in ("steps", "checks", "starter", "solution"):
        (lab / sub).mkdir(parents=True)
    (lab / "steps" / "01-answer.md").write_text("# answer\n")
    (lab / "checks" / "01_answer.py").write_text(CHECKER)
    (lab / "starter" / "README.txt").write_text("write the answer\n")
    (lab / "solution" / "answer.txt").write_text(solution)
    (lab / "lab.yaml").write_text(
        f"id: {lab_id}\ntitle: Pre-flight\nsummary: s\nduration_min: 1\nsteps:\n"
        "  - {id: answer, title: answer, file: steps/01-answer.md, check: checks/01_answer.py}\n"
    )


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    labs = tmp_path / "labs"
    make_lab(labs, "good-lab", "42\n")
    make_lab(labs, "broken-lab", "41\n")
    settings = Settings(data_dir=tmp_path / "data", labs_dir=labs, instructor_token="t")
    app = create_app(settings)
    with Session(app.state.ctx.engine) as s:
        create_event(s, title="Tonight", labs=["good-lab"], code="GOODEV")
        create_event(s, title="Broken", labs=["broken-lab"], code="BROKEN")
    app.state.ctx.engine.dispose()
    monkeypatch.setenv("LABSERVER_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("LABSERVER_LABS_DIR", str(labs))
    monkeypatch.setenv("LABSERVER_BACKEND", "local")
    return settings


def _left(settings: Settings) -> list[str]:
    root = settings.workspaces_dir
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_rehearse_runs_the_solution_checks_in_k_environments_and_cleans_up(server: Settings) -> None:
    result = CliRunner().invoke(cli, ["rehearse", "GOODEV", "--environments", "3"])
    assert result.exit_code == 0, result.output
    assert "3 environments" in result.output and "environment start" in result.output
    assert "lab good-lab" in result.output and "check answer" in result.output
    assert "passed 3/3" in result.output and "ready for the room" in result.output
    assert _left(server) == []


def test_rehearse_reports_a_step_its_solution_does_not_pass_and_still_cleans_up(server: Settings) -> None:
    result = CliRunner().invoke(cli, ["rehearse", "BROKEN", "-k", "2"])
    assert result.exit_code == 1, result.output
    assert "passed 0/2" in result.output and "no answer" in result.output and "NOT READY" in result.output
    assert _left(server) == []


def test_rehearse_an_unknown_event_says_what_to_give(server: Settings) -> None:
    result = CliRunner().invoke(cli, ["rehearse", "NOPE"])
    assert result.exit_code == 2 and "id or join code" in result.output
