"""``labserver import killercoda``: the mapping on Killercoda layouts rebuilt from public scenarios
(``killercoda/scenario-examples``: steps in folders with set-up scripts, flat files, assets, an
intro set-up), on the Ascend scenario written here, and the refusals (no network, no scripts run:
tests/checks/test_killercoda_lab.py runs the checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from labserver.content import Lab, load_lab
from labserver.content.killercoda import NotMappable, convert_markdown, import_scenario
from labserver.content.lint import lint_lab

SCENARIOS = Path(__file__).resolve().parent / "killercoda"
IMPORTABLE = [
    "ascend-pick-a-card",
    "foreground-background-multi-step",
    "linux-files-introduction",
    "upload-assets",
    "verification",
]


@pytest.mark.parametrize("name", IMPORTABLE)
def test_every_importable_layout_becomes_a_lab_that_loads_and_lints_without_errors(
    tmp_path: Path, name: str
) -> None:
    import_scenario(SCENARIOS / name, tmp_path / name)
    lab = load_lab(tmp_path / name)
    assert isinstance(lab, Lab), lab
    problems = lint_lab(tmp_path / name)
    assert not [p for p in problems if p.level == "error"], problems
    # what needs translation is marked: lint lists every English-only text
    warnings = " ".join(str(p) for p in problems)
    assert "Chinese step text is missing" in warnings and "no Simplified Chinese text (zh)" in warnings


def test_steps_checks_and_texts_map_as_documented(tmp_path: Path) -> None:
    result = import_scenario(SCENARIOS / "linux-files-introduction", tmp_path / "linux-files")
    lab = load_lab(tmp_path / "linux-files")
    assert isinstance(lab, Lab)
    assert lab.spec.title.en == "Linux Files Intro" and lab.spec.title.zh is None
    assert lab.spec.summary.en == "Basic commands to work with files"
    assert [s.id for s in lab.steps] == ["create-an-empty-file", "create-a-file-with-text", "delete-a-file"]
    first, last = lab.steps[0].instructions("en"), lab.steps[-1].instructions("en")
    assert first.index("A few commands for files.") < first.index("Create an empty file")  # intro on top
    assert last.rstrip().endswith("Done with files.")  # finish at the end
    assert "```bash run\ncd ~\n```" in first and "{{" not in first  # {{exec}} -> Run in terminal
    assert "```bash run\nrm ~/old-notes.txt\n```" in last  # an inline exec alone on its line
    verify = (tmp_path / "linux-files" / "checks" / "03_delete_a_file.verify.sh").read_text()
    assert verify == (SCENARIOS / "linux-files-introduction" / "step3" / "verify.sh").read_text()
    assert lab.steps[2].checker.name == "03_delete_a_file.py"
    assert "03_delete_a_file.verify.sh" in lab.steps[2].checker.read_text()
    # the intro's background.sh is set-up: a Run block on step 1 and its solve for the self-test
    assert (
        tmp_path / "linux-files" / "starter" / ".setup" / "intro-background.sh"
    ).read_text() == "touch ~/old-notes.txt\n"
    assert lab.steps[0].spec.solve == "bash .setup/intro-background.sh"
    assert first.startswith("Set up this step first:\n\n```bash run\nbash .setup/intro-background.sh\n```")
    assert "lab.yaml: title" in result.to_translate
    assert any("01-create-an-empty-file.zh.md" in t for t in result.to_translate)
    assert (tmp_path / "linux-files" / "solution").is_dir()


def test_foreground_and_background_of_every_page_are_set_up(tmp_path: Path) -> None:
    result = import_scenario(SCENARIOS / "foreground-background-multi-step", tmp_path / "fgbg")
    assert any(w.startswith("finish.background (finish/background.sh) is left out") for w in result.warnings)
    setup = tmp_path / "fgbg" / "starter" / ".setup"
    assert sorted(p.name for p in setup.iterdir()) == [
        "intro-background.sh",
        "intro-foreground.sh",
        "step1-background.sh",
        "step1-foreground.sh",
        "step2-background.sh",
        "step2-foreground.sh",
    ]
    spec = yaml.safe_load((tmp_path / "fgbg" / "lab.yaml").read_text())
    assert spec["steps"][0]["solve"] == (
        "bash .setup/intro-background.sh && bash .setup/intro-foreground.sh && "
        "bash .setup/step1-background.sh && bash .setup/step1-foreground.sh"
    )
    assert spec["steps"][1]["solve"] == "bash .setup/step2-background.sh && bash .setup/step2-foreground.sh"


def test_the_set_up_command_runs_the_scripts_in_the_lab_folder(tmp_path: Path) -> None:
    """The command a step's Run block types works on the starter as laid out (no root, no /tmp)."""
    import_scenario(SCENARIOS / "foreground-background-multi-step", tmp_path / "fgbg")
    spec = yaml.safe_load((tmp_path / "fgbg" / "lab.yaml").read_text())
    work = tmp_path / "workspace"
    subprocess.run(["cp", "-r", str(tmp_path / "fgbg" / "starter"), str(work)], check=True)
    out = subprocess.run(
        ["bash", "-c", spec["steps"][0]["solve"]], cwd=work, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and "Hello" in out.stdout and "DONE" in out.stdout
    assert (work / "background0").is_file() and (work / "background1").is_file()


def test_assets_go_to_the_starter_with_their_targets_and_modes(tmp_path: Path) -> None:
    result = import_scenario(SCENARIOS / "upload-assets", tmp_path / "assets")
    starter = tmp_path / "assets" / "starter"
    assert (starter / "conf.yaml").read_text() == "name: demo\n"
    assert os.access(starter / "run.sh", os.X_OK)  # chmod +x kept; target /root = the lab folder
    assert (starter / "app1-json" / "app1" / "config" / "app.json").is_file()  # ** glob
    assert not (starter / "app1-json" / "app1" / "config" / "config.yaml").exists()
    assert (starter / "my" / "location" / "app2" / "cnf" / "cnf.json").is_file()
    assert any("/my/location is outside the home folder" in w for w in result.warnings)


def test_absolute_paths_outside_the_lab_folder_are_reported(tmp_path: Path) -> None:
    result = import_scenario(SCENARIOS / "verification", tmp_path / "verification")
    said = " ".join(result.warnings)
    assert "checks/01_please_create_a_file.verify.sh: /etc/panda is outside the lab folder" in said
    assert "steps/01-please-create-a-file.md: /etc/panda" in said


@pytest.mark.parametrize(
    "name,reason,words",
    [
        ("kubernetes-2node-multi-step-verification", "kubernetes", "Kubernetes playground"),
        ("two-hosts", "multi-host", "several hosts"),
    ],
)
def test_what_does_not_map_is_refused_and_nothing_is_written(
    tmp_path: Path, name: str, reason: str, words: str
) -> None:
    with pytest.raises(NotMappable) as refused:
        import_scenario(SCENARIOS / name, tmp_path / name)
    assert refused.value.reason == reason and words in str(refused.value)
    assert not (tmp_path / name).exists()


def test_a_script_that_reaches_another_node_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "step1").mkdir(parents=True)
    (src / "index.json").write_text(
        '{"title": "t", "details": {"steps": [{"title": "a", "text": "step1/text.md", "verify": "step1/verify.sh"}]},'
        ' "backend": {"imageid": "ubuntu"}}'
    )
    (src / "step1" / "text.md").write_text("x\n")
    (src / "step1" / "verify.sh").write_text("ssh node01 test -f /x\n")
    with pytest.raises(NotMappable, match="reaches another host") as refused:
        import_scenario(src, tmp_path / "out")
    assert refused.value.reason == "multi-host"


def test_a_folder_that_is_not_a_scenario_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotMappable, match="no index.json"):
        import_scenario(tmp_path, tmp_path / "out")
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(NotMappable, match="not valid JSON"):
        import_scenario(tmp_path, tmp_path / "out")
    (tmp_path / "index.json").write_text('{"title": "no steps", "details": {}}')
    with pytest.raises(NotMappable, match="no steps"):
        import_scenario(tmp_path, tmp_path / "out")


def test_markers_are_converted() -> None:
    text = "```\nls\n```{{exec}}\n\n```\npwd\n```{{copy}}\n\nsay `whoami`{{exec interrupt}} inline\n\n`date`{{exec}}\n"
    assert (
        convert_markdown(text)
        == "```bash run\nls\n```\n\n```\npwd\n```\n\nsay `whoami` inline\n\n```bash run\ndate\n```\n"
    )


def test_the_command_prints_warnings_translation_and_refusals(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "labserver.cli", "import", "killercoda", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            check=False,
        )

    ok = run(str(SCENARIOS / "verification"), "--out", "labs/panda")
    assert ok.returncode == 0, ok.stderr
    assert "wrote the lab panda" in ok.stdout and "/etc/panda" in ok.stdout and "to translate" in ok.stdout
    again = run(str(SCENARIOS / "verification"), "--out", "labs/panda")
    assert again.returncode == 2 and "exists" in again.stderr
    refused = run(str(SCENARIOS / "kubernetes-2node-multi-step-verification"))
    assert refused.returncode == 2 and "Kubernetes playground" in refused.stderr


def test_a_scenario_cannot_make_the_import_read_files_outside_its_folder(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the author's private file\n")
    src = tmp_path / "scenario"
    (src / "assets").mkdir(parents=True)
    (src / "assets" / "link.txt").symlink_to(secret)
    (src / "step.md").symlink_to(secret)
    (src / "index.json").write_text(
        '{"title": "t", "details": {"intro": {"text": "../secret.txt", "background": "/etc/hostname"},'
        ' "steps": [{"title": "a", "text": "step.md", "verify": "../secret.txt"}],'
        ' "assets": {"host01": [{"file": "*", "target": "~"}, {"file": "../*.txt", "target": "~"}]}},'
        ' "backend": {"imageid": "ubuntu"}}'
    )
    result = import_scenario(src, tmp_path / "out")
    written = [p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert not any("private" in text for text in written)
    assert not (tmp_path / "out" / "starter" / ".setup").exists()
    assert any("not a file in the scenario folder" in w for w in result.warnings)
