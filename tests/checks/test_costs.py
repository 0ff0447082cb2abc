"""``labserver selftest LAB --record-costs``: each step's check cost on the solution goes to
``checks/costs.yaml`` (real checker processes on a throwaway local environment), and the room's
checks get the wall budget the cost gives (``check_request``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labserver.backends.base import EnvRef
from labserver.checks.request import check_request
from labserver.cli.main import app as cli
from labserver.content.loader import Lab, load_lab

#: a checker that burns about ``BURN`` CPU-s of its own, then judges answer.txt
CHECKER = textwrap.dedent("""
    import time
    from pathlib import Path
    from labkit.check import Failure, main

    def check():
        end = time.process_time() + {burn}
        while time.process_time() < end:
            pass
        if Path("answer.txt").read_text().strip() != "42":
            raise Failure("answer.txt should say 42")
        return "42 it is"

    main(check)
""")


#: a checker that writes its verdict by hand, without ``cpu_s`` (the protocol does not require it)
PLAIN = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path

    ok = Path("answer.txt").read_text().strip() == "42"
    os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": ok, "message": "by hand"}).encode())
    sys.exit(0 if ok else 1)
""")


def make_lab(root: Path, burns: dict[str, float], plain: str = "") -> Path:
    lab = root / "costly"
    for folder in ("steps", "checks", "starter", "solution"):
        (lab / folder).mkdir(parents=True)
    (lab / "starter" / "answer.txt").write_text("0\n")
    (lab / "solution" / "answer.txt").write_text("42\n")
    steps = []
    for i, (step, burn) in enumerate(burns.items(), 1):
        body = PLAIN if step == plain else CHECKER.format(burn=burn)
        (lab / "checks" / f"{i:02d}_{step}.py").write_text(body)
        (lab / "steps" / f"{i:02d}-{step}.md").write_text(f"# {step}\n")
        steps.append(
            f"  - {{id: {step}, title: {step}, file: steps/{i:02d}-{step}.md, "
            f"check: checks/{i:02d}_{step}.py, timeout_s: 120}}"
        )
    (lab / "lab.yaml").write_text(
        "id: costly\ntitle: Costly\nsummary: s\nduration_min: 5\nsteps:\n" + "\n".join(steps) + "\n"
    )
    return lab


def test_selftest_records_each_steps_cpu_cost_on_the_solution(tmp_path: Path) -> None:
    lab = make_lab(tmp_path, {"cheap": 0.0, "dear": 1.5})
    result = CliRunner().invoke(cli, ["selftest", str(lab), "--no-mutants", "--record-costs"])
    assert result.exit_code == 0, result.output
    loaded = load_lab(lab)
    assert isinstance(loaded, Lab), loaded
    assert set(loaded.costs) == {"cheap", "dear"}
    # the burning checker's own 1.5 CPU-s is in its cost; the cheap one costs an interpreter start
    assert loaded.costs["dear"] >= 1.5
    assert loaded.costs["cheap"] < loaded.costs["dear"] - 1.0
    assert "recorded in" in result.output and "costs.yaml" in result.output


def test_no_costs_are_recorded_when_a_checker_reports_none(tmp_path: Path) -> None:
    lab = make_lab(tmp_path, {"cheap": 0.0, "plain": 0.0}, plain="plain")
    result = CliRunner().invoke(cli, ["selftest", str(lab), "--no-mutants", "--record-costs"])
    assert result.exit_code == 1, result.output
    assert "all 4 checks behaved" in result.output  # the self-test itself is fine
    assert "costs not recorded: no cpu_s in the verdict of plain" in result.output
    assert not (lab / "checks" / "costs.yaml").exists()


@pytest.mark.parametrize(
    "cost,timeout,budget",
    [(None, 60, 60), (0.3, 60, 10), (2.0, 60, 20), (16.0, 60, 60), (0.5, 5, 5)],
)
def test_a_rooms_check_gets_the_wall_budget_of_its_recorded_cost(
    tmp_path: Path, cost: float | None, timeout: float, budget: float
) -> None:
    lab = make_lab(tmp_path, {"dear": 0.0})
    yaml = lab / "lab.yaml"
    yaml.write_text(yaml.read_text().replace("timeout_s: 120", f"timeout_s: {timeout}"))
    if cost is not None:
        (lab / "checks" / "costs.yaml").write_text(f"dear: {cost}\n")
    loaded = load_lab(lab)
    assert isinstance(loaded, Lab), loaded
    ref = EnvRef("e", "local", "x")
    assert check_request(loaded, loaded.steps[0], ref).timeout_s == budget
    assert check_request(loaded, loaded.steps[0], ref, timeout_s=timeout).timeout_s == timeout
