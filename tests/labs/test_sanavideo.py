"""The sanavideo lab beyond what ``labserver selftest`` proves (its mutants live in
``labs/sanavideo/mutants/`` and run in tests/labs/test_all_labs.py): the figures of a solved run,
mistakes made outside the step's files (a wrong ``out.mp4``, nothing done yet), and the tie cases
the step-3 checker relies on.

Checkers run the way the server runs them (``python -I``, cwd = the lab folder, verdict on the
``LAB_RESULT_FD`` pipe).
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


def workspace(solved: Path, tmp_path: Path) -> Path:
    ws = tmp_path / "sanavideo"
    shutil.copytree(solved, ws, symlinks=True)
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
    assert metrics["peak_kib"] <= metrics["reference_peak_kib"] < metrics["capacity_kib"]
    assert 0.13 < metrics["weights_fraction"] < 0.145  # SANA-Video: ~9.5 GB of a 64 GiB card


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
def test_unfused_starter_ops(solved: Path, tmp_path: Path) -> None:
    ws = workspace(solved, tmp_path)
    shutil.copy(LAB / "starter" / "npu_patches.py", ws / "npu_patches.py")
    expect_failed(ws, "02_fused_ops", "still runs plain torch ops", "npu_rms_norm")


@pytest.mark.slow
def test_starter_steps_fail_without_step_one(tmp_path: Path) -> None:
    ws = tmp_path / "sanavideo"
    shutil.copytree(LAB / "starter", ws)
    expect_failed(ws, "01_deploy", "bash infer_platform.sh")
    for check in ("02_fused_ops", "03_a4w4", "04_one_device"):
        expect_failed(ws, check, "step 1")


def test_tie_cases_are_ties_and_detected() -> None:
    """The step-3 blocks hold exact ties of both grids (else a wrong tie rule passes), and the
    difference report counts them as ties."""
    import torch

    sys.path.insert(0, str(LAB / "checks"))
    import labkit.mx as lmx
    import sana_harness as h

    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    for t in h.E4M3_TIES:  # halfway between two E4M3 neighbours
        assert any((a + b) / 2 == t for a, b in zip(grid, grid[1:], strict=False)), t
    for t in h.E2M1_TIES:
        e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
        assert any((a + b) / 2 == t for a, b in zip(e2m1, e2m1[1:], strict=False)), t
    x = h.scale_rule_cases(7)
    ref = lmx.dequantize(lmx.quantize_mx(x, "mxfp4"), torch.float32)
    wrong = h._wrong_rules(x, "mxfp4")
    for mode in ("round away", "round down"):
        d = h._differences(x, wrong[mode], ref, "mxfp4")
        assert d["n"] > 0 and d["ties"] == d["n"], (mode, d)
    d = h._differences(x, wrong["ceil"], ref, "mxfp4")
    assert d["ties"] < d["n"]
    ref8 = lmx.dequantize(lmx.quantize_mx(x, "mxfp8"), torch.float32)
    d = h._differences(x, h._wrong_rules(x, "mxfp8")["round away"], ref8, "mxfp8")
    assert d["n"] > 0 and d["ties"] == d["n"], d


def test_npu_mode_bf16_model_samples_the_prompt() -> None:
    """Issue 31: on a card the patched pipeline loads TinySana in bf16 (``npu.patch``), and the
    sampler fed it float32 noise and timesteps ("mat1 and mat2 must have the same dtype" in the
    DiT's ``x_embedder``), then the VAE a float32 latent: the one-click script crashed at its last
    stage. A bf16 model on the CPU takes the same dtype path; it must draw the prompt as float32
    does (the latent and the Euler steps stay float32, each stage gets its own dtype)."""
    import torch

    sys.path.insert(0, str(LAB / "checks"))
    import sanacheck as sc
    from tinysana.model import TinySana
    from tinysana.sampling import generate

    torch.set_num_threads(1)
    model = TinySana.load(sc.WEIGHTS).to("cpu", torch.bfloat16)
    frames = generate(model, sc.PROMPT)
    assert frames.dtype == torch.uint8 and tuple(frames.shape) == (sc.FRAMES, sc.SIZE, sc.SIZE, 3)
    assert sc.mismatch(sc.analyse(frames.numpy()), sc.PROMPT) is None
    ref = generate(TinySana.load(sc.WEIGHTS), sc.PROMPT)
    assert (frames.float() - ref.float()).abs().mean() < 2.0  # 0.2 of 255 on average when written
