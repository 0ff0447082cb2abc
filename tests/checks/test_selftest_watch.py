"""``labserver selftest LAB --watch`` (issue 34): which steps a changed file touches (pure), the
self-test of some steps (the solves before them still run), and the loop re-running the step an
edit touched (real checks on the local backend, on a two-step lab whose checks read files)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from labserver.checks.selftest import selftest
from labserver.checks.selftest_watch import affected_steps, watch_selftest
from labserver.config import Settings
from labserver.content import Lab, load_lab

CHECK = """\
from pathlib import Path
from labkit.check import Failure, main, msg

def check():
    text = Path("{name}.txt").read_text() if Path("{name}.txt").is_file() else ""
    if text.strip() != "{want}":
        raise Failure(msg("{name}.txt must say {want}, it says " + repr(text), "{name}.txt 应写 {want}"))
    return msg("ok", "好")

main(check)
"""


def two_step_lab(root: Path) -> Lab:
    lab = root / "two-steps"
    for folder in ("steps", "checks", "starter", "solution", "mutants/a/wrong", "mutants/b/wrong"):
        (lab / folder).mkdir(parents=True)
    (lab / "lab.yaml").write_text(
        "id: two-steps\ntitle: t\nsummary: s\nduration_min: 5\nsteps:\n"
        "  - {id: a, title: A, file: steps/01-a.md, check: checks/01_a.py, timeout_s: 30}\n"
        "  - {id: b, title: B, file: steps/02-b.md, check: checks/02_b.py, timeout_s: 30,"
        " solve: 'cat a.txt > a-copy.txt'}\n"
    )
    for n, name, want in ((1, "a", "A"), (2, "b", "B")):
        (lab / "steps" / f"0{n}-{name}.md").write_text(f"Write {name}.txt\n")
        (lab / "steps" / f"0{n}-{name}.zh.md").write_text(f"写 {name}.txt\n")
        (lab / "checks" / f"0{n}_{name}.py").write_text(CHECK.format(name=name, want=want))
        (lab / "solution" / f"{name}.txt").write_text(want + "\n")
        (lab / "mutants" / name / "wrong" / f"{name}.txt").write_text("nope\n")
        (lab / "mutants" / name / "wrong" / "mutant.yaml").write_text(
            "what: {en: wrong text, zh: 写错了}\nclass: logic\n"
        )
    loaded = load_lab(lab)
    assert isinstance(loaded, Lab), loaded
    return loaded


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return two_step_lab(tmp_path)


@pytest.mark.parametrize(
    "changed,steps",
    [
        (["steps/02-b.md"], ["b"]),
        (["steps/01-a.zh.md"], ["a"]),
        (["checks/02_b.py"], ["b"]),
        (["checks/helper.py"], ["a", "b"]),  # a helper no step names: every step may use it
        (["mutants/a/wrong/a.txt"], ["a"]),
        (["mutants/b/wrong/mutant.yaml", "steps/01-a.md"], ["a", "b"]),
        (["lab.yaml"], ["a", "b"]),
        (["solution/b.txt"], ["a", "b"]),
        (["starter/x.py"], ["a", "b"]),
        (["checks/costs.yaml"], []),
        (["mutants/equivalent.yaml"], []),
        (["steps/img/figure.png"], []),
    ],
)
def test_affected_steps(lab: Lab, changed: list[str], steps: list[str]) -> None:
    assert affected_steps(lab, [Path(c) for c in changed]) == steps
    assert affected_steps(lab, [lab.path / c for c in changed]) == steps  # absolute paths too


def test_only_checks_the_chosen_step_after_playing_the_ones_before(lab: Lab) -> None:
    report = selftest(lab, only=["b"])
    assert report.ok, report.lines()
    assert [(r.phase, r.label) for r in report.results] == [
        ("starter", "b"),
        ("solution", "b"),
        ("mutant", "b/wrong"),
    ]


def test_a_failing_solve_before_the_chosen_step_is_reported(lab: Lab) -> None:
    (lab.path / "lab.yaml").write_text(
        (lab.path / "lab.yaml").read_text().replace("timeout_s: 30}", "timeout_s: 30, solve: 'exit 3'}", 1)
    )
    broken = load_lab(lab.path)
    assert isinstance(broken, Lab)
    report = selftest(broken, only=["b"])
    assert not report.ok
    failed = report.failures()[0]
    assert (failed.phase, failed.step, failed.verdict.status) == ("solution", "a", "error")
    assert "exit 3" in failed.verdict.message


def test_the_watch_runs_everything_then_the_step_a_save_touched(lab: Lab) -> None:
    runs: list[list[str]] = []
    reports: list[bool] = []
    problems: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        watch_selftest(
            lab.path,
            Settings(),
            on_result=lambda _r: None,
            on_report=lambda rep: reports.append(rep.ok),
            on_problems=lambda found: problems.extend(str(p) for p in found),
            on_run=runs.append,
            stop=stop,
        )

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(reports) == 1)
        time.sleep(0.5)  # the watcher is up
        (lab.path / "mutants" / "b" / "wrong" / "b.txt").write_text("still wrong\n")
        wait_for(lambda: len(reports) == 2)
        (lab.path / "lab.yaml").write_text("id: two-steps\nstepz: []\n")  # broken: reported, no run
        wait_for(lambda: bool(problems))
    finally:
        stop.set()
        thread.join(timeout=30)
    assert runs == [["a", "b"], ["b"]]
    assert reports == [True, True]
    assert any("stepz" in p for p in problems)


def wait_for(cond, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)
