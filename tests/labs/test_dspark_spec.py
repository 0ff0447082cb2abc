"""The dspark-spec lab's own statistics and references (the selftest with its mutants runs in
tests/labs/test_all_labs.py).

- the sampling test of step 5 (chi-square at 1e-4, 6000 runs, fixed p and q): its power against
  the wrong verifiers whose output distribution differs, simulated from their exact output
  distributions, and its false-fail rate for a correct verifier;
- the checker's near-tie rule for "lossless";
- the reference solution's loop: lossless on other prompts, deterministic emulated TPOT, faster
  than MTP1;
- step 5's fixed run ends with a whole block one token short of n;
- step 4's batched tau sweep (``checks/tausweep.py``) gives the checker's loop's iterations and
  TPOT at every tau;
- the shipped mutants are what training/make_mutants.py generates from the current solution.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO

LAB = REPO / "labs" / "dspark-spec"
sys.path.insert(0, str(LAB / "checks"))
import dsparkcheck as dc  # noqa: E402
import tausweep  # noqa: E402

ALPHA = 1e-4


def verify_constants() -> tuple[torch.Tensor, torch.Tensor, int]:
    """P, Q and TRIALS as the step 5 checker defines them (read from its source, not copied)."""
    src = (LAB / "checks" / "05_verify.py").read_text()
    ns: dict = {"torch": torch}
    start = src.index("P = torch.tensor(")
    end = src.index("\n", src.index("TRIALS, SEED, ALPHA"))
    exec(src[start:end], ns)  # the constants block only
    return ns["P"], ns["Q"], ns["TRIALS"]


def output_distributions(p: torch.Tensor, q: torch.Tensor, accept) -> tuple[list[torch.Tensor], list[float]]:
    """Exact distribution of the emitted token at each output position (positions independent),
    for a verifier that accepts draft x at position i with probability accept(p_i, q_i)[x] and
    otherwise samples the normalised residual; and the acceptance rate at each drafted position."""
    out, betas = [], []
    for i in range(p.shape[0]):
        if i == q.shape[0]:
            out.append(p[i])
            break
        a = accept(p[i], q[i])
        r = torch.clamp(p[i] - q[i], min=0)
        r = r / r.sum()
        beta = float((q[i] * a).sum())
        out.append(q[i] * a + (1 - beta) * r)
        betas.append(beta)
    return out, betas


def rejection_rate(
    dists: list[torch.Tensor], betas: list[float], p: torch.Tensor, trials: int, sims: int
) -> float:
    """Share of simulated checks (``trials`` runs each) in which some output position fails."""
    g = torch.Generator().manual_seed(0)
    sizes = [trials, int(trials * betas[0]), int(trials * betas[0] * betas[1])]
    rejected = 0
    for _ in range(sims):
        for pos, (d, n) in enumerate(zip(dists, sizes, strict=True)):
            counts = torch.bincount(
                torch.multinomial(d.float(), n, replacement=True, generator=g), minlength=len(d)
            )
            if dc.chi2_pvalue(counts.double(), p[pos]) < ALPHA:
                rejected += 1
                break
    return rejected / sims


def test_correct_verifier_distribution_is_the_target() -> None:
    p, q, _ = verify_constants()
    dists, _ = output_distributions(p, q, lambda pi, qi: torch.clamp(pi / qi, max=1))
    for d, want in zip(dists, p, strict=True):
        assert torch.allclose(d, want, atol=1e-12)


@pytest.mark.parametrize(
    "name, accept",
    [
        ("draft's own distribution", lambda pi, qi: torch.ones_like(pi)),
        ("p/q inverted", lambda pi, qi: torch.clamp(qi / pi, max=1)),
        ("accept when p > q only", lambda pi, qi: (pi > qi).double()),
    ],
)
def test_sampling_test_has_power(name: str, accept) -> None:
    p, q, trials = verify_constants()
    dists, betas = output_distributions(p, q, accept)
    assert rejection_rate(dists, betas, p, trials, sims=300) >= 0.999, name


def test_sampling_test_rarely_fails_a_correct_verifier() -> None:
    p, q, trials = verify_constants()
    dists, betas = output_distributions(p, q, lambda pi, qi: torch.clamp(pi / qi, max=1))
    assert rejection_rate(dists, betas, p, trials, sims=2000) <= 0.003  # 3 tests at 1e-4: about 3e-4


def test_chi2_pvalue_is_uniform_scale() -> None:
    probs = torch.tensor([0.5, 0.5], dtype=torch.float64)
    # stat = 3.841 for df 1 is the 5% point
    counts = torch.tensor([50 + 9.8, 50 - 9.8], dtype=torch.float64)
    assert abs(dc.chi2_pvalue(counts, probs) - 0.05) < 1e-3


def test_lossless_rule_allows_only_near_ties() -> None:
    ref = [5, 6, 7, 8]
    assert dc.expect_lossless([5, 6, 7, 8], ref, [1.0] * 4, "x", "h") == 0
    assert dc.expect_lossless([5, 6, 9, 9], ref, [1.0, 1.0, dc.TIE / 2, 1.0], "x", "h") == 1
    with pytest.raises(dc.Failure):
        dc.expect_lossless([5, 6, 9, 8], ref, [1.0] * 4, "x", "h")
    with pytest.raises(dc.Failure):
        dc.expect_lossless([5, 6, 7], ref, [1.0] * 4, "x", "h")


def test_teacher_forced_lossless_check_agrees_with_token_by_token_greedy() -> None:
    (p,) = dc.heldout_prompts(1, "pytest-forced")
    ref, margins = dc.ref_greedy(p, 16)
    ties, hidden = dc.expect_greedy(ref, p, 16, "x", "h")
    assert ties == 0 and hidden.shape[0] == len(p) + 16
    i = next(j for j, m in enumerate(margins) if m > 10 * dc.TIE)
    wrong = ref[:i] + [(ref[i] + 1) % 50] + ref[i + 1 :]
    with pytest.raises(dc.Failure, match=f"token {i} is"):
        dc.expect_greedy(wrong, p, 16, "x", "h")
    with pytest.raises(dc.Failure, match="expected exactly 16"):
        dc.expect_greedy(ref[:-1], p, 16, "x", "h")
    with pytest.raises(dc.Failure, match="outside the vocabulary"):
        dc.expect_greedy(ref[:-1] + [10**6], p, 16, "x", "h")


def test_reference_loop_is_lossless_deterministic_and_faster_than_mtp1() -> None:
    prompts = dc.heldout_prompts(3, "pytest")
    for p in prompts:
        ref, _ = dc.ref_greedy(p, 32)
        a = dc.ref_decode(p, 32, 0.3)
        b = dc.ref_decode(p, 32, 0.3)
        assert a["tokens"] == ref
        assert a["tpot_ms"] == b["tpot_ms"]
        mtp, _ = dc.ref_mtp1(p, 32)
        assert a["tpot_ms"] < mtp


def test_verify_fixed_run_ends_its_last_block_at_n() -> None:
    """Step 5's fixed run (FIXED_PROMPT at FIXED_TAU, FIXED_N tokens): its last iteration starts one
    token short of n with a whole block (a cache sized without the block overflows there) and
    rejects the block's first token, so the loop ends at exactly n (a loop that runs while
    len(out) <= n makes one more iteration); its greedy tokens have no near tie."""
    src = (LAB / "checks" / "05_verify.py").read_text()
    ns: dict = {}
    exec(next(line for line in src.splitlines() if line.startswith("FIXED_PROMPT, ")), ns)
    _, drafter, tok = dc.models()
    prompt = tok.encode(ns["FIXED_PROMPT"], bos=True)
    n = ns["FIXED_N"]
    run = dc.ref_decode(prompt, n, ns["FIXED_TAU"])
    cursor, last = 1, None
    for a, drafted in zip(run["accepted"], run["drafted"], strict=True):
        last = (cursor, a, drafted)
        cursor += a + 1
    assert last == (n - 1, 0, drafter.block_size) and cursor == n
    assert min(dc.ref_greedy(prompt, n)[1]) > 10 * dc.TIE


@pytest.mark.parametrize("salt", ["pytest-sweep-a", "pytest-sweep-b"])
def test_batched_sweep_is_the_checkers_loop_at_every_tau(salt: str) -> None:
    """Step 4 judges TAU by tausweep.sweep: per prompt and tau, the same tokens, iterations
    (accepted, drafted) and emulated TPOT (to float rounding) as dc.ref_decode's loop, also at a
    tau off the grid and at the extremes; prompts of different lengths share the batches."""
    prompts = dc.heldout_prompts(4, salt)
    assert len({len(p) for p in prompts}) > 1
    taus = [0.0, 0.3, 0.6, 0.83, 0.95, 0.99, 1.0]
    fast = tausweep.sweep(prompts, 40, taus)
    for p, got in zip(prompts, fast, strict=True):
        for tau in taus:
            want = dc.ref_decode(p, 40, tau)
            assert got[tau]["tokens"] == want["tokens"], (p, tau)
            assert got[tau]["accepted"] == want["accepted"], (p, tau)
            assert got[tau]["drafted"] == want["drafted"], (p, tau)
            assert got[tau]["tpot_ms"] == pytest.approx(want["tpot_ms"], rel=1e-12), (p, tau)


def test_shipped_mutants_match_the_generator(tmp_path: Path) -> None:
    copy = tmp_path / "dspark-spec"
    shutil.copytree(LAB, copy, ignore=shutil.ignore_patterns("__pycache__", "weights"))
    subprocess.run(
        [sys.executable, str(copy / "training" / "make_mutants.py")], check=True, capture_output=True
    )
    for f in sorted((LAB / "mutants").rglob("*")):
        if f.is_file():
            assert (copy / f.relative_to(LAB)).read_text() == f.read_text(), f
    assert importlib.util.find_spec("labkit.dspark") is not None
