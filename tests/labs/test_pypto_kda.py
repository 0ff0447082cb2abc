"""pypto-kda: the trusted references of its checkers, the tolerance they use, and the figures the
reference solution reaches in the emulator (the selftest proves the checks and the mutants)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.conftest import REPO

LAB = REPO / "labs" / "pypto-kda"
sys.path.insert(0, str(LAB / "checks"))

import kdaref  # noqa: E402
from labkit import tile  # noqa: E402


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """starter/ with solution/ laid over it, importable."""
    root = tmp_path_factory.mktemp("pypto") / "pypto-kda"
    shutil.copytree(LAB / "starter", root)
    shutil.copytree(LAB / "solution", root, dirs_exist_ok=True)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for m in (
        "tileops",
        "tril_inverse",
        "kda_tile",
        "kda_tile_naive",
        "kda_decode",
        "kda_decode_naive",
        "kda_data",
    ):
        sys.modules.pop(m, None)


def _mod(name: str) -> ModuleType:
    return __import__(name)


@pytest.mark.parametrize("T", [1, 63, 64, 65, 200])
def test_chunked_form_equals_the_recurrence_in_float64(T: int) -> None:
    x = kdaref.make_inputs(T, H=2, T=T, D=16, dtype=torch.float64)
    o, s = kdaref.recurrent_kda(**x)
    oc, sc = kdaref.chunk_kda(**x)
    assert (o - oc).abs().max() < 1e-12 and (s - sc).abs().max() < 1e-12


@pytest.mark.parametrize("C", [8, 16, 32, 64, 40])
def test_the_blockwise_inverse_equals_the_inverse(C: int) -> None:
    a = torch.tril(
        0.3 * torch.randn(C, C, generator=torch.Generator().manual_seed(C), dtype=torch.float64), -1
    )
    ref = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + a)
    assert (kdaref.tril_inverse_blocks(a) - ref).abs().max() < 1e-12


def test_the_starter_data_is_the_checkers_data(ws: Path) -> None:
    mine = _mod("kda_data").make_inputs(5, H=2, T=70, D=32)
    theirs = kdaref.make_inputs(5, H=2, T=70, D=32)
    for n in theirs:
        assert torch.equal(mine[n], theirs[n])


def test_tolerance_separates_the_solution_from_the_nearest_mistake(ws: Path) -> None:
    """The solution's fp32 error is far below TOL; an exclusive gate cumsum (the smallest mistake
    the mutants make) is far above it."""
    chunk = _mod("kda_chunk").chunk_kda
    worst = 0.0
    for seed in range(4):
        x = kdaref.make_inputs(seed, H=2, T=150, D=32, dtype=torch.float64)
        ref, _ = kdaref.recurrent_kda(**x)
        f = {n: t.float() for n, t in x.items()}
        o, _ = chunk(f["q"], f["k"], f["v"], f["g"], f["beta"], f["s0"], 32**-0.5, 64)
        worst = max(worst, float((o.double() - ref).abs().max()) / kdaref.tolerance(ref))
        g_excl = {**x, "g": x["g"]}
        wrong, _ = kdaref.chunk_kda(
            **{**g_excl, "g": torch.cat([torch.zeros_like(x["g"][:, :1]), x["g"][:, :-1]], 1)}
        )
        assert float((wrong - ref).abs().max()) > 10 * kdaref.tolerance(ref)
    assert worst < 0.1


def test_the_tuned_prefill_is_faster_than_the_naive_one_and_both_are_right(ws: Path) -> None:
    x = kdaref.make_inputs(3, H=1, T=512, D=32, dtype=torch.float64)
    ref, sref = kdaref.recurrent_kda(**x)
    f = {n: t.float() for n, t in x.items()}
    times = {}
    for name in ("kda_tile_naive", "kda_tile"):
        o, s = torch.zeros(1, 512, 32), torch.zeros(1, 32, 32)
        k = tile.Kernel(name)
        _mod(name).chunk_kda_tile(k, f["q"], f["k"], f["v"], f["g"], f["beta"], f["s0"], o, s, 32**-0.5, 64)
        assert (o.double() - ref).abs().max() < kdaref.tolerance(ref)
        assert (s.double() - sref).abs().max() < kdaref.tolerance(sref)
        times[name] = k.report()
    assert times["kda_tile"]["max_parallel"] > times["kda_tile_naive"]["max_parallel"] == 1
    assert times["kda_tile_naive"]["time_us"] > 1.3 * times["kda_tile"]["time_us"]


def test_the_tuned_decode_merges_subgraphs_and_leaves_the_cube(ws: Path) -> None:
    N, H, D = 32, 4, 32
    x = kdaref.make_inputs(9, H=N * H, T=1, D=D, dtype=torch.float64)
    ref, _ = kdaref.recurrent_kda(**x)
    f = {n: t.float() for n, t in x.items()}
    tok = [f[n][:, 0].reshape(N, H, -1).contiguous() for n in ("q", "k", "v", "g")]
    beta = f["beta"][:, 0].reshape(N, H).contiguous()
    reps = {}
    for name in ("kda_decode_naive", "kda_decode"):
        S, o = f["s0"].reshape(N, H, D, D).clone(), torch.zeros(N, H, D)
        k = tile.Kernel(name)
        _mod(name).decode_tile(k, *tok, beta, S, o, D**-0.5)
        assert (o.reshape(N * H, D).double() - ref[:, 0]).abs().max() < kdaref.tolerance(ref)
        reps[name] = k.report()
    naive, tuned = reps["kda_decode_naive"], reps["kda_decode"]
    assert (naive["tasks"], naive["subgraphs"], naive["matmul_m"]) == (512, 4, [1])
    assert (tuned["tasks"], tuned["subgraphs"], tuned["matmul_m"]) == (128, 1, [])
    assert naive["time_us"] > 2.5 * tuned["time_us"]


def test_the_chunk_rule_accepts_a_row_loop_inverse_and_rejects_a_token_loop(tmp_path: Path) -> None:
    """Step 3 tells a chunked form from a token loop by how its torch calls follow the chunk size:
    fla's own forward substitution (a Python loop over rows) must still count as chunked."""
    import harness

    sol = (LAB / "solution" / "kda_chunk.py").read_text()
    row_loop = sol.replace(
        "        Tm = torch.linalg.solve_triangular(eye + A, eye.expand(H, C, C), upper=False) * bc[:, None, :]",
        "        X = -A.clone()\n        for i in range(1, C):\n"
        "            X[:, i, :i] = X[:, i, :i] + (X[:, i, :, None] * X[:, :, :i]).sum(-2)\n"
        "        Tm = (X + eye) * bc[:, None, :]",
    )
    assert row_loop != sol
    x = {n: t.float() for n, t in kdaref.make_inputs(1, H=1, T=256).items()}
    ratios = {}
    for name, text in (
        ("row_loop", row_loop),
        ("token_loop", (LAB / "mutants/chunked/token-by-token/kda_chunk.py").read_text()),
    ):
        d = tmp_path / name
        d.mkdir()
        (d / "kda_chunk.py").write_text(text)
        shutil.copy(LAB / "solution" / "kda_recurrent.py", d)
        sys.path.insert(0, str(d))
        try:
            c8, c64 = harness.chunk_calls(x, 32**-0.5, [8, 64])
        finally:
            sys.path.remove(str(d))
            sys.modules.pop("kda_chunk", None)
            sys.modules.pop("kda_recurrent", None)
        ratios[name] = c8 / c64
    assert ratios["row_loop"] > 1.3 and ratios["token_loop"] == 1.0
