"""The sanavideo lab: its self-test, and the mistakes its checkers must catch with a helpful message.

Each mistake is a solved workspace (solution overlaid, ``infer_platform.sh`` run) with one file
replaced from ``fixtures/sanavideo/<mistake>/`` (or one action undone); the step's checker runs the
way the server runs it (``python -I``, cwd = the lab folder, verdict on the ``LAB_RESULT_FD`` pipe)
and must fail, saying what is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labserver.content import Lab, load_lab
from tests.conftest import REPO

LAB = REPO / "labs" / "sanavideo"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sanavideo"
VENV_BIN = str(Path(sys.executable).parent)


def overlay(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True)


def run_checker(lab_dir: Path, check: str, lang: str = "en") -> tuple[int, dict, str]:
    """(exit code, verdict, log) of ``checks/<check>.py`` run as the server runs it."""
    read, write = os.pipe()
    env = {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(lab_dir),
        "LAB_ID": "sanavideo",
        "LAB_STEP": check,
        "LAB_DIR": str(lab_dir),
        "LAB_DEVICE": "cpu-emu",
        "LAB_RUN_ID": "test",
        "LAB_LANG": lang,
        "LAB_RESULT_FD": str(write),
    }
    proc = subprocess.Popen(
        [sys.executable, "-I", str(LAB / "checks" / f"{check}.py")],
        cwd=lab_dir,
        env=env,
        pass_fds=(write,),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        raw = fh.read()
    log, _ = proc.communicate(timeout=120)
    verdict = json.loads(raw) if raw.strip() else {}
    return proc.returncode, verdict, log.decode("utf-8", "replace")


def run_script(lab_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run(
        ["bash", "infer_platform.sh", *argv],
        cwd=lab_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("solved") / "sanavideo"
    shutil.copytree(LAB / "starter", ws)
    overlay(LAB / "solution", ws)
    res = run_script(ws)
    assert res.returncode == 0, res.stdout + res.stderr
    return ws


def workspace(solved: Path, tmp_path: Path, fixture: str | None = None) -> Path:
    ws = tmp_path / "sanavideo"
    shutil.copytree(solved, ws, symlinks=True)
    if fixture:
        overlay(FIXTURES / fixture, ws)
    return ws


def expect_failed(lab_dir: Path, check: str, *words: str, lang: str = "en") -> str:
    code, verdict, log = run_checker(lab_dir, check, lang)
    assert verdict, f"no verdict from {check}:\n{log}"
    assert (code, verdict["passed"]) == (1, False), verdict
    text = verdict["message"] + "\n" + "\n".join(verdict["hints"])
    for w in words:
        assert w in text, f"{w!r} not in the message of {check}:\n{text}"
    return text


def test_lab_loads() -> None:
    lab = load_lab(LAB)
    assert isinstance(lab, Lab), lab
    assert [s.id for s in lab.steps] == ["deploy", "fused-ops", "a4w4", "one-device"]


@pytest.mark.slow
def test_solved_workspace_passes_every_step_with_figures(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path)
    metrics = {}
    for check in ("01_deploy", "02_fused_ops", "03_a4w4", "04_one_device"):
        code, verdict, log = run_checker(ws, check)
        assert (code, verdict.get("passed")) == (0, True), (check, verdict, log)
        metrics.update(verdict["metrics"])
    assert metrics["emu_ms_after"] < metrics["emu_ms_before"]
    assert metrics["dit_weight_kib_a4w4"] < 0.7 * metrics["dit_weight_kib_bf16"]
    assert metrics["peak_kib"] <= metrics["capacity_kib"]


@pytest.mark.slow
def test_patch_not_applied(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path)
    shutil.copy(
        ws / "upstream" / "TinySana-0.1.1" / "tinysana" / "pipeline.py",
        ws / "TinySana" / "tinysana" / "pipeline.py",
    )
    expect_failed(ws, "01_deploy", "npu.patch is not applied", "Triton")


@pytest.mark.slow
def test_patch_half_applied_names_the_conflicting_hunk(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path, "patch_half_applied")
    run_script(ws)  # inference fails on the unpatched CUDA line; the tree is what the check reads
    text = expect_failed(ws, "01_deploy", "half applied", "CUDA")
    assert "pipeline.py.rej" in text


@pytest.mark.slow
def test_mp4_of_the_wrong_prompt(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path)
    res = run_script(ws, "a green triangle moving left", "out.mp4")
    assert res.returncode == 0, res.stderr
    expect_failed(ws, "01_deploy", "does not show 'a red circle moving right'", "green", "moving left")


@pytest.mark.slow
def test_wrong_prompt_message_in_chinese(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path)
    run_script(ws, "a blue square moving down", "out.mp4")
    expect_failed(ws, "01_deploy", "没有呈现", lang="zh")


@pytest.mark.slow
def test_rotary_mode_half(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path, "rope_half")
    expect_failed(ws, "02_fused_ops", 'rotary_mode="half"', "interleave")


@pytest.mark.slow
def test_unfused_starter_ops(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path)
    shutil.copy(LAB / "starter" / "npu_patches.py", ws / "npu_patches.py")
    expect_failed(ws, "02_fused_ops", "still runs plain torch ops", "npu_rms_norm")


@pytest.mark.slow
def test_mxfp4_on_every_layer_fails_quality(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path, "mxfp4_everywhere")
    expect_failed(
        ws, "03_a4w4", "MXFP4 is applied to every quantized layer", "below the 34 dB", "attn.proj=mxfp4"
    )


@pytest.mark.slow
def test_wrong_mx_scale_rule(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path, "scale_ceil")
    expect_failed(ws, "03_a4w4", "does not follow the MX scale rule", "ceil(log2(amax))", "floor(log2(amax))")


@pytest.mark.slow
def test_stages_left_on_the_device(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path, "no_staging")
    expect_failed(ws, "04_one_device", "Out of device memory", "offload.to_host")


@pytest.mark.slow
def test_starter_steps_fail_without_step_one(tmp_path: Path) -> None:
    ws = tmp_path / "sanavideo"
    shutil.copytree(LAB / "starter", ws)
    expect_failed(ws, "01_deploy", "bash infer_platform.sh")
    for check in ("02_fused_ops", "03_a4w4", "04_one_device"):
        expect_failed(ws, check, "step 1")
