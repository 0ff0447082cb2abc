"""Lint names the file and field of every problem; a broken lab never stops the server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from labserver.app import create_app
from labserver.cli.main import app as cli
from labserver.config import Settings
from labserver.content.lint import lint_lab
from labserver.content.markdown import render
from tests.conftest import REPO

GOOD = REPO / "labs" / "getting-started"


def copy_lab(tmp_path: Path) -> Path:
    dest = tmp_path / "labs" / "getting-started"
    shutil.copytree(GOOD, dest)
    return dest


def problems(lab: Path) -> list[str]:
    return [str(p) for p in lint_lab(lab)]


def test_the_shipped_lab_is_clean() -> None:
    assert [p for p in lint_lab(GOOD) if p.level == "error"] == []


@pytest.mark.parametrize(
    "edit,expected",
    [
        (
            lambda s: s.replace("duration_min: 15", "duration_min: fifteen"),
            "getting-started/lab.yaml: duration_min",
        ),
        (lambda s: s.replace("timeout_s: 30", "timeout_s: -3"), "steps[2] (step 'write-file').timeout_s"),
        (lambda s: s.replace("    timeout_s: 30", "    timout_s: 30"), "timout_s: unknown field"),
        (lambda s: s.replace("id: find-device", "id: Find Device"), "steps[0]"),
        (lambda s: s.replace("checks/03_write_file.py", "checks/nope.py"), "checks/nope.py does not exist"),
        (lambda s: s.replace("id: getting-started", "id: other-name"), "must equal the folder name"),
        (lambda s: s + "\n  - [broken", "not valid YAML"),
        (lambda s: s.replace("id: run-script", "id: find-device"), "used twice"),
    ],
)
def test_malformed_lab_yaml_names_file_and_field(tmp_path: Path, edit, expected: str) -> None:  # type: ignore[no-untyped-def]
    lab = copy_lab(tmp_path)
    yaml_path = lab / "lab.yaml"
    yaml_path.write_text(edit(yaml_path.read_text()))
    found = problems(lab)
    assert any(expected in p for p in found), found


def test_unknown_code_block_marker_is_an_error(tmp_path: Path) -> None:
    lab = copy_lab(tmp_path)
    md = lab / "steps" / "02-run-script.md"
    md.write_text(md.read_text() + "\n```bash runn\nls\n```\n")
    assert any(
        "02-run-script.md: line" in p and "unknown code-block marker 'runn'" in p for p in problems(lab)
    )


def test_missing_translation_is_a_warning(tmp_path: Path) -> None:
    lab = copy_lab(tmp_path)
    (lab / "steps" / "03-write-file.zh.md").unlink()
    yaml_path = lab / "lab.yaml"
    yaml_path.write_text(
        yaml_path.read_text().replace(
            'title: {en: "Write a file", zh: "写一个文件"}', 'title: "Write a file"'
        )
    )
    found = lint_lab(lab)
    assert {p.level for p in found} == {"warning"}
    assert any("03-write-file.zh.md" in str(p) for p in found)
    assert any("steps[2] (step 'write-file').title" in str(p) for p in found)


def test_cli_lint_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab = copy_lab(tmp_path)
    monkeypatch.setenv("LABSERVER_LABS_DIR", str(tmp_path / "labs"))
    runner = CliRunner()
    assert runner.invoke(cli, ["lint"]).exit_code == 0
    (lab / "lab.yaml").write_text("id: getting-started\ntitle: x\n")
    result = runner.invoke(cli, ["lint"])
    assert result.exit_code == 1
    assert "getting-started/lab.yaml: summary" in result.output


def test_server_starts_and_shows_a_broken_lab_as_unavailable(tmp_path: Path) -> None:
    lab = copy_lab(tmp_path)
    (lab / "lab.yaml").write_text("id: [not, a, string\n")
    app = create_app(Settings(data_dir=tmp_path / "data", labs_dir=tmp_path / "labs", instructor_token="t"))
    with TestClient(app) as client:
        assert client.get("/healthz").json()["broken_labs"] == 1
    assert "getting-started" in app.state.ctx.catalog.broken


def test_run_marker_renders_a_button_and_escapes_html() -> None:
    html = render("```bash run\necho '<b>'\n```\n\n<script>alert(1)</script>\n")
    assert 'class="run-in-terminal"' in html and 'data-command="echo &#x27;&lt;b&gt;&#x27;"' in html
    assert "<script>" not in html


def test_a_timeout_under_5x_the_recorded_cost_is_a_warning(tmp_path: Path) -> None:
    lab = copy_lab(tmp_path)
    (lab / "checks" / "costs.yaml").write_text("write-file: 6.5\nfind-device: 2\n")
    found = lint_lab(lab)
    slow = [p for p in found if p.field == "steps[2] (step 'write-file').timeout_s"]
    assert [p.level for p in slow] == ["warning"], found
    assert "30 s is under 5x the 6.5 CPU-s" in slow[0].message and "at least 32.5" in slow[0].message
    assert not [p for p in found if "find-device" in p.field and "timeout_s" in p.field]  # 60 >= 5 x 2
    assert not [p for p in found if p.level == "error"]
    (lab / "checks" / "costs.yaml").write_text("write-file: 6\n")  # 30 = 5 x 6: enough
    assert not [p for p in lint_lab(lab) if "timeout_s" in p.field]


@pytest.mark.parametrize(
    "text,field,needle",
    [
        ("no-such-step: 1\n", "no-such-step", "no step 'no-such-step' in lab.yaml"),
        ("write-file: fast\n", "write-file", "'fast' is not a number"),
        ("write-file: -1\n", "write-file", "above 0"),
        ("write-file: .nan\n", "write-file", "above 0"),
        ("write-file: true\n", "write-file", "not a number"),
        ("- write-file\n", "", "must be a mapping"),
        ("write-file: [1\n", "", "not valid YAML"),
    ],
)
def test_a_malformed_costs_file_is_an_error_naming_file_and_field(
    tmp_path: Path, text: str, field: str, needle: str
) -> None:
    lab = copy_lab(tmp_path)
    (lab / "checks" / "costs.yaml").write_text(text)
    errors = [p for p in lint_lab(lab) if p.level == "error"]
    assert [(p.file, p.field) for p in errors] == [("getting-started/checks/costs.yaml", field)], errors
    assert needle in errors[0].message


def test_recorded_costs_are_written_in_step_order_and_merged(tmp_path: Path) -> None:
    from labserver.content.costs import load_costs, write_costs
    from labserver.content.loader import Lab, load_lab

    lab = copy_lab(tmp_path)
    (lab / "checks" / "costs.yaml").unlink(missing_ok=True)  # the lab's own recording: start afresh
    ids = ["find-device", "run-script", "write-file"]
    write_costs(lab, {"write-file": 0.004, "find-device": 2.345}, ids)
    assert load_costs(lab, ids) == ({"find-device": 2.35, "write-file": 0.01}, [])
    write_costs(lab, {"run-script": 1.5}, ids)  # a partial recording forgets nothing
    text = (lab / "checks" / "costs.yaml").read_text()
    assert (
        text.startswith("# CPU seconds") and "find-device: 2.35\nrun-script: 1.5\nwrite-file: 0.01\n" in text
    )
    loaded = load_lab(lab)
    assert isinstance(loaded, Lab) and loaded.costs["run-script"] == 1.5
    with pytest.raises(ValueError, match="no such step in the lab: nope"):
        write_costs(lab, {"nope": 1.0}, ids)
