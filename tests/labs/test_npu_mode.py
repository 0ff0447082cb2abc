"""NPU mode (issue 31): every lab's solution, and the hands-on scripts, as they run where labkit sees
an Ascend card, on labkit's FAKE ``torch_npu`` (``labkit.npu_fake``: the PrivateUse1 backend named
``npu``, tensors backed by the CPU, the fused ops' ``torch_npu`` signatures over labkit's references).

``LABKIT_FAKE_NPU=1`` in the server's environment makes the local backend give every lab process
the fake and say ``LAB_DEVICE=npu:0``, ``ASCEND_RT_VISIBLE_DEVICES=0`` as a card's container does;
each check's fork server and checker import labkit, so ``labkit.device.get_device()`` is
``npu:0`` in the checker, in the attendee's children and in the step's ``solve`` command.

What runs on the (fake) card: sanavideo's one-click script (TinySana in bf16 on ``npu:0``),
getting-started's ``warmup.py`` and its device step. Every other check computes on CPU tensors
and judges *emulated* figures (sessions with ``measurer=False``): those checks are emulator-only
by design, on a card as here; in NPU mode they prove that nothing in them trips over a visible
card (a session that would measure wall time, a device string, a memory limit). docs/labkit.md,
"NPU mode on a CPU", lists what only a card proves.

Cost: what each lab's checks cost on the solution, forked from one zygote per lab as in the
server (measured in NPU mode, checker + children, CPU-s per lab: getting-started 1.8, sanavideo
5.2, dsv4-offload 6.7, kv-offload 2.7, pypto-kda 1.9, longcat-parallel 1.0, dspark-spec 8.5,
agent-deploy 12.5; they fall with issue 30's cuts), plus one zygote start per lab and the two
scripts below (2-4 CPU-s each).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import labkit  # noqa: F401  (imported before LABKIT_FAKE_NPU is set: this process keeps no fake)
import numpy as np
import pytest

from labserver.checks.selftest import selftest
from labserver.content import Lab, load_lab
from tests.conftest import REPO

LAB_DIRS = sorted(p for p in (REPO / "labs").iterdir() if (p / "lab.yaml").exists())
VENV_BIN = str(Path(sys.executable).parent)


def npu_env(home: Path) -> dict[str, str]:
    """A card's container environment (Docker backend) with the fake in every labkit process."""
    return {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LAB_DEVICE": "npu:0",
        "ASCEND_RT_VISIBLE_DEVICES": "0",
        "LABKIT_FAKE_NPU": "1",
    }


def run_in_npu_mode(ws: Path, argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` in the solved lab folder ``ws`` with the fake NPU (:func:`npu_env`), output captured."""
    return subprocess.run(argv, cwd=ws, env=npu_env(home), capture_output=True, text=True, timeout=300)


def solved(lab_id: str, root: Path) -> Path:
    ws = root / lab_id
    shutil.copytree(REPO / "labs" / lab_id / "starter", ws)
    shutil.copytree(REPO / "labs" / lab_id / "solution", ws, dirs_exist_ok=True)
    return ws


@pytest.mark.slow
@pytest.mark.parametrize("lab_dir", LAB_DIRS, ids=[p.name for p in LAB_DIRS])
def test_npu_mode_solution_passes_every_step(lab_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step's ``solve`` and check on the solution, in order, in an environment that says
    ``npu:0`` with the fake installed: every check passes (as ``labserver selftest`` runs them)."""
    monkeypatch.setenv("LABKIT_FAKE_NPU", "1")
    lab = load_lab(lab_dir)
    assert isinstance(lab, Lab), lab
    report = selftest(lab, starter=False, mutants=False)
    assert report.ok, "\n".join(report.lines())
    if lab.id == "getting-started":  # the witness: the checks ran where labkit sees the fake card
        first = report.results[0].verdict.message
        assert "runs on npu" in first and "fake NPU" in first, first


def test_npu_mode_local_backend_gives_every_process_the_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the per-lab tests rely on: with ``LABKIT_FAKE_NPU`` set, an environment of the local
    backend says ``npu:0``, and a process in it that imports labkit sees the fake card; unset, it
    is the CPU emulation with no ``torch_npu``."""
    from labserver.backends import make_backend
    from labserver.checks.selftest import throwaway_spec
    from labserver.config import Settings

    lab = load_lab(REPO / "labs" / "getting-started")
    assert isinstance(lab, Lab)
    code = (
        "import sys, labkit; from labkit.device import get_device; d = get_device(); "
        "print(d.kind, d.torch_device, getattr(sys.modules.get('torch_npu'), '__version__', None))"
    )

    async def run(tmp: Path) -> tuple[str, str]:
        base = Settings()
        backend = make_backend(
            base.model_copy(update={"data_dir": tmp, "labs_dir": lab.path.parent}), "local"
        )
        ref = await backend.create(throwaway_spec(lab, base))
        try:
            res = await backend.exec(ref, ["python", "-c", code], timeout=60)
            return ref.device, (res.stdout + res.stderr).decode("utf-8", "replace")
        finally:
            await backend.destroy(ref)

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        monkeypatch.setenv("LABKIT_FAKE_NPU", "1")
        device, out = asyncio.run(run(Path(tmp) / "on"))
        assert device == "npu:0" and "npu npu:0 0.0.0+labkit.fake" in out, out
        monkeypatch.delenv("LABKIT_FAKE_NPU")
        device, out = asyncio.run(run(Path(tmp) / "off"))
        assert device == "cpu-emu" and "cpu-emu cpu None" in out, out


def test_sanavideo_npu_mode_one_click_script_writes_the_video(tmp_path: Path) -> None:
    """Hands-on 1 as on a card: ``infer_platform.sh`` checks the environment (an NPU), applies
    ``npu.patch``, verifies the weights and samples on ``npu:0`` in bf16 (what the patch chooses
    there). It used to stop at its last stage: float32 noise and timesteps into the bf16 DiT, then
    CPU-made timestep and RoPE tables beside device tensors. The MP4 is valid and shows the prompt."""
    sys.path.insert(0, str(REPO / "labs" / "sanavideo" / "checks"))
    import sanacheck as sc

    ws = solved("sanavideo", tmp_path)
    res = run_in_npu_mode(ws, ["bash", "infer_platform.sh", "a blue square moving up", "blue.mp4"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "fake NPU" in res.stdout and "(npu)" in res.stdout, res.stdout  # step [1/5] saw the card
    assert "Applied patch tinysana/pipeline.py cleanly" in res.stderr + res.stdout
    assert "on npu:0" in res.stdout, res.stdout
    frames, meta = sc.probe_mp4(ws / "blue.mp4")
    assert meta["codec"] == "h264" and frames.shape == (sc.FRAMES, sc.SIZE, sc.SIZE, 3)
    assert sc.mismatch(sc.analyse(frames), "a blue square moving up") is None, sc.analyse(frames)
    # the patched pipeline put the model on the card in bf16 (the branch the one-click script took);
    # with step 2's fused ops (the solution's npu_patches.py) it samples there too: their calls
    # reach torch_npu with its signatures, in bf16
    probe = (
        "import sys, json, torch; sys.path[:0] = ['TinySana', '.']; "
        "from tinysana.pipeline import TinySanaPipeline; from labkit import npu_fake; "
        "p = TinySanaPipeline('TinySana/checkpoints/tinysana.safetensors'); w = next(p.model.parameters()); "
        "import npu_patches; npu_patches.apply_npu_patches(); f = p('a green circle moving left'); "
        "print(json.dumps([str(p.device), str(p.dtype), str(w.device), str(w.dtype), "
        "npu_fake.stats()['fused_ops'], f.tolist()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ws,
        env=npu_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    device, dtype, w_device, w_dtype, fused, clip = json.loads(out.stdout.strip().splitlines()[-1])
    assert [device, dtype, w_device, w_dtype] == ["npu:0", "torch.bfloat16", "npu:0", "torch.bfloat16"]
    assert set(fused) == {"npu_rms_norm", "npu_rotary_mul", "npu_fusion_attention"}, fused
    clip = np.asarray(clip, dtype=np.uint8)
    assert sc.mismatch(sc.analyse(clip), "a green circle moving left") is None, sc.analyse(clip)


def test_dsv4_offload_npu_mode_launch_script_serves(tmp_path: Path) -> None:
    """Hands-on dsv4-offload as on a card: the recipe's launch script, plan and serving, end to end.
    The lab's card is the emulated A3 by design (every figure is emulated, ``measurer=False``): on a
    real card the script runs the same, on the CPU, and prints the same figures."""
    ws = solved("dsv4-offload", tmp_path)
    res = run_in_npu_mode(ws, ["bash", "recipe/scripts/launch_ds4flash_npu.sh"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "fits" in res.stdout and "wrote plan.json" in res.stdout, res.stdout
    assert "served 4 requests" in res.stdout and "decode:" in res.stdout, res.stdout
    assert (ws / "plan.json").is_file()


def test_npu_mode_environment_is_the_docker_backends() -> None:
    """The hand-run scripts above get what a card's container gets (Docker backend), plus the fake."""
    from labserver.backends.docker.scheduler import Node, Placement

    node = Node(name="n", url="unix:///var/run/docker.sock", kind="npu", cards=(0,))
    env = Placement(node, card=0).environment()
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == npu_env(Path("/"))["ASCEND_RT_VISIBLE_DEVICES"]
    assert Placement(node, card=0).device == npu_env(Path("/"))["LAB_DEVICE"]
    assert os.environ.get("LABKIT_FAKE_NPU") is None  # never leaks into the test process
