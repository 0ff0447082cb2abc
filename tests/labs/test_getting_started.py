"""getting-started: the device figures measure.py prints are right at full scale (issue 15 §3), and
step 4's verdict is the same for every seed the checker may draw (no near ties between the
solution and the mutants), in process, without the child of the real check."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml
from labkit import emu

from tests.conftest import REPO
from tests.labs.run_checker import run_checker

LAB = REPO / "labs" / "getting-started"
MEASURE = LAB / "starter" / "measure.py"
ROW = re.compile(r"^(\S+)\s+(eager|graph)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$", re.M)


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def full_scale_step_ms(profile: str, graph_mode: bool) -> float:
    """The decode step of measure.py's model from the cost model directly (scale 1, no session)."""
    hidden, ffn, layers = 1024, 2816, 4
    p = emu.get_profile(profile)
    shapes = [(hidden, 3 * hidden), (hidden, hidden), (hidden, 2 * ffn), (ffn, hidden)]
    total = sum(
        emu.op_cost(
            p, flops=2 * k * n, bytes=2 * k * n, dtype="bf16", graph_mode=graph_mode, scale=1.0
        ).total_s
        for k, n in shapes
    )
    return layers * total * 1e3


def test_measure_prints_device_figures_at_full_scale() -> None:
    """It printed 66.09 ms for the 910B decode step (the toy scale 2**-10 applied to full-size
    bytes); the same step at full scale is 0.384 ms."""
    out = subprocess.run([sys.executable, str(MEASURE)], capture_output=True, text=True, check=True).stdout
    line = re.search(r"^decode_step_ms = ([0-9.]+)$", out, re.M)
    assert line is not None, out
    assert float(line.group(1)) == pytest.approx(full_scale_step_ms("910B", False), abs=1e-4)
    assert float(line.group(1)) == pytest.approx(0.3842, abs=1e-4)
    rows = ROW.findall(out)
    assert {(r[0], r[1]) for r in rows} == {("910B", "eager"), ("910B", "graph"), ("950DT", "eager")}, out
    for profile, mode, _launches, weights_ms, launch_ms, step_ms in rows:
        want = full_scale_step_ms(profile, mode == "graph")
        assert float(step_ms) == pytest.approx(want, abs=1e-4), (profile, mode)
        assert float(weights_ms) + float(launch_ms) == pytest.approx(want, abs=2e-4), (profile, mode)


def _outcome(fn: Any, cases: list[Any]) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    for c in cases:
        try:
            y, rstd = fn(c.x.clone(), c.w.clone(), c.eps)
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}"})
        else:
            results.append({"y": y, "rstd": rstd})
    return {"results": results, "delegated": []}


def test_rmsnorm_verdict_is_stable_over_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_LANG", "en")
    monkeypatch.syspath_prepend(str(LAB / "checks"))
    judge = _load(LAB / "checks" / "rmsnorm_judge.py", "gs_rmsnorm_judge")
    solution = _load(LAB / "solution" / "rmsnorm.py", "gs_solution_rmsnorm").rms_norm
    mutants = {}
    for d in sorted((LAB / "mutants" / "implement-rmsnorm").iterdir()):
        spec = yaml.safe_load((d / "mutant.yaml").read_text())
        if spec["class"] != "reference":  # those are caught by the child's tracing (the selftest)
            mutants[d.name] = (_load(d / "rmsnorm.py", f"gs_mut_{d.name}").rms_norm, spec["expect"]["en"])
    assert len(mutants) >= 8
    for seed in range(40):
        cases = judge.make_cases(seed)
        problem, _ = judge.judge(cases, _outcome(solution, cases))
        assert problem == "", (seed, problem)
        # the solution is far from the bf16 limit: a few near ties at most, never a boundary case
        bf16 = next(c for c in cases if c.x.dtype == torch.bfloat16)
        y, _ = solution(bf16.x, bf16.w, bf16.eps)
        ulps = judge._ulps(y, judge.reference(bf16)[0].to(torch.bfloat16), torch.bfloat16)
        assert ulps.mean().item() < judge.MAX_MEAN_ULPS / 10
        for name, (fn, phrase) in mutants.items():
            problem, _ = judge.judge(cases, _outcome(fn, cases))
            assert phrase.lower() in problem.lower(), (seed, name, problem)


@pytest.mark.parametrize(
    ("lab_device", "written", "passes"),
    [("npu:0", "npu", True), ("npu:0", "cpu-emu", False), ("npu", "npu", True), ("npu", "cpu-emu", False)],
)
def test_find_device_judges_the_attendees_environment_not_the_graders(
    tmp_path: Path, lab_device: str, written: str, passes: bool
) -> None:
    """An NPU attendee's check runs in a grader without a card (Docker and Kubernetes backends):
    the expected kind is the environment's (``LAB_DEVICE`` from the server), not the grader's own.
    The server sets ``npu:0`` (issue 31: the check knew only ``npu`` and fell back to the grader's
    own ``cpu-emu``, failing every NPU attendee's right answer)."""
    (tmp_path / "device.txt").write_text(written + "\n")
    env = {**os.environ, "LAB_DEVICE": lab_device, "LAB_LANG": "en"}
    result, proc = run_checker(LAB / "checks" / "01_find_device.py", tmp_path, env, isolated=False)
    assert result["passed"] is passes, (result, proc.stderr)
    if not passes:
        assert "'npu'" in result["message"], result
