"""``labserver mutate`` (issue 29): machine-made mutants of the attendee's code, judged by the
lab's own checks on a real local environment."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labserver.checks.mutate import mutate, owned_files, plan
from labserver.checks.mutation import attendee_regions, mutations
from labserver.cli.main import app
from labserver.content import Lab, load_lab
from labserver.content.mutants import load_equivalents
from tests.conftest import REPO

SOURCE = textwrap.dedent(
    '''\
    import torch


    def helper(x):
        return x  # the starter has this one too


    def refill(pool, side, keys, n):
        """The step's function."""
        total = 0
        for i in range(n):  # every slot
            # copy on the side stream
            with torch.npu.stream(side):
                pool[i] = keys[i:i + 2].clone()
            torch.npu.current_stream().wait_stream(side)
            total += i
        if total > 3 and n >= 1:
            return torch.cat(keys, 0)
        return total
    '''
)
STARTER = textwrap.dedent(
    """\
    import torch


    def helper(x):
        return x  # the starter has this one too


    def refill(pool, side, keys, n):
        raise NotImplementedError
    """
)


def _write(root: Path, text: str) -> Path:
    root.mkdir(parents=True)
    (root / "pool.py").write_text(text)
    return root


def test_only_the_functions_the_attendee_writes_are_mutated(tmp_path: Path) -> None:
    regions = attendee_regions(_write(tmp_path / "solution", SOURCE), _write(tmp_path / "starter", STARTER))
    assert [(r.path, r.function) for r in regions] == [("pool.py", "refill")]
    ms = mutations(SOURCE, "pool.py", regions)
    assert ms and all(m.line > 8 for m in ms), "helper() is the starter's, never mutated"
    by_op = {m.operator for m in ms}
    assert {"compare", "arith", "augassign", "boolean", "number", "slice", "drop-call", "drop-store"} <= by_op
    assert {"call-arg", "swap-args", "one-pass"} <= by_op
    after = {(m.operator, m.after.strip()) for m in ms}
    # the wait the step teaches, dropped; the store into the pool, dropped; one pass of the loop
    assert ("drop-call", "pass") in after and ("drop-store", "pass") in after
    assert ("slice", "pool[i] = keys[i:i + 2 - 1].clone()") in after
    assert ("slice", "for i in range(n - 1):  # every slot") in after  # its comment kept
    assert ("compare", "if total >= 3 and n >= 1:") in after
    assert ("boolean", "if total > 3 or n >= 1:") in after
    assert ("call-arg", "pool[i] = keys[i:i + 2]") in after  # a method call dropped: its object stays
    assert ("swap-args", "return torch.cat(0, keys)") in after
    one_pass = next(m for m in ms if m.operator == "one-pass")
    assert (
        one_pass.after.rstrip().endswith("break")
        and one_pass.after.count("\n") == one_pass.before.count("\n") + 1
    )
    for m in ms:
        compile(m.text, "pool.py", "exec")
        # only the mutated statement changes: comments and every other line stay as written
        diff = [ln for ln in m.diff(SOURCE).splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        assert all("#" not in ln or "every slot" in ln for ln in diff), diff
        assert sum(ln.startswith("-") for ln in diff) <= m.before.count("\n"), m.summary
    assert len({m.key for m in ms}) == len(ms)


def test_a_mutant_keeps_its_key_when_lines_move(tmp_path: Path) -> None:
    regions = attendee_regions(_write(tmp_path / "a", SOURCE), _write(tmp_path / "s", STARTER))
    moved = SOURCE.replace("import torch\n", "import torch\n\nCONSTANT = 1\n\n")
    regions2 = attendee_regions(_write(tmp_path / "b", moved), tmp_path / "s")
    keys = [m.key for m in mutations(SOURCE, "pool.py", regions)]
    keys2 = [m.key for m in mutations(moved, "pool.py", regions2)]
    assert keys == keys2


def test_the_hand_written_mutants_say_which_step_owns_a_file() -> None:
    lab = load_lab(REPO / "labs" / "getting-started")
    assert isinstance(lab, Lab)
    owners = owned_files(lab)
    assert "rmsnorm.py" in owners["implement-rmsnorm"]
    assert {judges for _, judges in plan(lab)} == {("implement-rmsnorm",)}


def test_equivalents_are_validated(tmp_path: Path) -> None:
    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "equivalent.yaml").write_text(
        "- {key: nothex, reason: short}\n- {key: 0123456789}\n"
    )
    found, problems = load_equivalents(tmp_path)
    assert found == {}
    assert {p.field for p in problems} == {"0.key", "0.reason", "1.reason"}, problems


@pytest.mark.slow
def test_getting_started_kills_every_mutant_but_the_listed_equivalent(tmp_path: Path) -> None:
    lab = load_lab(REPO / "labs" / "getting-started")
    assert isinstance(lab, Lab)
    report = mutate(lab)
    assert report.ok, report.baseline
    counts = report.counts()
    assert counts["survived"] == 0 and counts["error"] == 0, report.table()
    assert counts["equivalent"] == 1 and counts["killed"] >= 12, counts
    assert report.score(counts) == 1.0
    # without its equivalent.yaml the same mutant survives, and the command shows its diff and exits 1
    copy = tmp_path / "getting-started"
    shutil.copytree(lab.path, copy)
    (copy / "mutants" / "equivalent.yaml").unlink()
    result = CliRunner().invoke(app, ["mutate", str(copy), "--operator", "call-arg"])
    assert result.exit_code == 1, result.output
    assert (
        "SURVIVED fd4ed4b2db" in result.output
        and "+    y = (xf * rstd * weight).to(x.dtype)" in result.output
    )


def test_unknown_steps_and_operators_are_refused_with_the_choices() -> None:
    result = CliRunner().invoke(app, ["mutate", "getting-started", "--step", "nope", "--operator", "flip"])
    assert result.exit_code == 2
    assert (
        "nope, flip" in result.output
        and "implement-rmsnorm" in result.output
        and "drop-call" in result.output
    )


def test_a_function_that_differs_only_in_comments_is_the_starters(tmp_path: Path) -> None:
    commented = STARTER.replace(
        "def refill(pool, side, keys, n):\n", "def refill(pool, side, keys, n):\n    # a new comment\n"
    )
    commented = commented.replace(
        "    return x  # the starter has this one too", "    return x  # another comment"
    )
    regions = attendee_regions(
        _write(tmp_path / "solution", commented), _write(tmp_path / "starter", STARTER)
    )
    assert regions == []
