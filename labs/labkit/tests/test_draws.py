"""labkit.check.draws: every press gets unseen inputs, and every press gets the boundary cases."""

from __future__ import annotations

import math

import pytest
import torch
from labkit.check.draws import Draws, chunk_sizes, run_seed, split_sizes

SEEDS = range(200)


def test_the_seed_follows_the_run_id_the_step_and_the_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_ID", "lab")
    monkeypatch.setenv("LAB_STEP", "step")
    monkeypatch.setenv("LAB_RUN_ID", "r1")
    a = run_seed("x")
    assert run_seed("x") == a
    assert run_seed("y") != a
    monkeypatch.setenv("LAB_RUN_ID", "r2")
    assert run_seed("x") != a
    monkeypatch.setenv("LAB_STEP", "other")
    assert len({run_seed(str(i)) for i in range(50)}) == 50


def test_the_seed_never_is_one_the_workspace_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_RUN_ID", "r")
    taken = run_seed("s")
    assert run_seed("s", avoid=(taken,)) != taken


def test_a_press_without_a_run_id_still_draws_fresh_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_RUN_ID", raising=False)
    assert len({run_seed("s") for _ in range(20)}) > 1


@pytest.mark.parametrize("by", [2, 3, 16, 64])
def test_a_size_not_divisible_by_the_chunk_leaves_a_short_last_chunk(by: int) -> None:
    remainders = set()
    for s in SEEDS:
        n = Draws(seed=s).not_divisible(by + 1, 20 * by, by=by)
        assert by + 1 <= n <= 20 * by and n % by
        remainders.add(n % by)
    assert 1 in remainders and by - 1 in remainders  # both ends of the last chunk, on every seed family


def test_a_divisible_size_is_divisible() -> None:
    assert all(Draws(seed=s).divisible(10, 300, by=32) % 32 == 0 for s in SEEDS)


@pytest.mark.parametrize("parts", [2, 3, 4, 8])
def test_chunk_and_tensor_split_sizes_are_torchs(parts: int) -> None:
    for n in range(1, 70):
        x = torch.empty(n)
        assert chunk_sizes(n, parts) == [len(c) for c in torch.chunk(x, parts)]
        assert split_sizes(n, parts) == [len(c) for c in torch.tensor_split(x, parts)]


@pytest.mark.parametrize("parts", [3, 4, 8])
def test_the_drawn_batch_tells_chunk_from_tensor_split(parts: int) -> None:
    for s in SEEDS:
        n = Draws(seed=s).chunk_split_differs(parts)
        x = torch.empty(n)
        assert [len(c) for c in torch.chunk(x, parts)] != [len(c) for c in torch.tensor_split(x, parts)]


def test_an_uneven_split_adds_up_and_is_uneven() -> None:
    for s in SEEDS:
        sizes = Draws(seed=s).uneven_split(24, 4)
        assert sum(sizes) == 24 and len(set(sizes)) > 1 and min(sizes) > 0


def test_power_of_two_edges_straddle_a_power_of_two() -> None:
    for s in SEEDS:
        lo, p, hi = Draws(seed=s).pow2_edges(3, 10)
        assert p & (p - 1) == 0 and (lo, hi) == (p - 1, p + 1)


def test_same_total_shapes_differ_with_the_same_count() -> None:
    for s in range(50):
        shapes = Draws(seed=s).same_total_shapes(48, dims=2, count=2)
        assert len(set(shapes)) == 2 and all(math.prod(sh) == 48 for sh in shapes)


@pytest.mark.parametrize(
    ("dtype", "torch_dtype"),
    [("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16)],
)
def test_float_edges_are_one_ulp_either_side_of_a_power_of_two(dtype: str, torch_dtype: torch.dtype) -> None:
    for s in range(50):
        below, p, above = Draws(seed=s).float_edges(dtype, lo_exp=-4, hi_exp=4)
        t = torch.tensor([below, p, above], dtype=torch_dtype)
        assert t.double().tolist() == [below, p, above]  # representable exactly
        assert torch.nextafter(t[1:2], torch.zeros(1, dtype=torch_dtype)).item() == below
        assert torch.nextafter(t[1:2], torch.full((1,), 2 * p, dtype=torch_dtype)).item() == above
        _, e = torch.frexp(t[:1].float())
        assert int(e) - 1 == round(math.log2(p)) - 1  # the exact floor(log2) of the value below


def test_one_ulp_under_a_power_of_two_is_where_a_float_log2_rounds_up() -> None:
    # why the edge matters: floor(log2(x)) in float32 says k for x = 2**k minus one ulp (k >= 2)
    below, p, _ = Draws(seed=0).float_edges("float32", lo_exp=4, hi_exp=4)
    assert math.floor(torch.log2(torch.tensor(below)).item()) == 4  # wrong: below < 16
    _, e = torch.frexp(torch.tensor(below))
    assert int(e) - 1 == 3


def test_points_around_every_kink() -> None:
    for s in range(50):
        pts = Draws(seed=s).around([0.5, 2.0, 0.0], rel=1e-3, absolute=1e-4)
        for i, k in enumerate([0.5, 2.0, 0.0]):
            below, at, above = pts[3 * i : 3 * i + 3]
            assert below < at == k < above


def test_ties_lie_halfway_between_grid_points() -> None:
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    for s in range(50):
        for t in Draws(seed=s).ties(grid):
            assert any(abs(t - (a + b) / 2) == 0 for a, b in zip(grid, grid[1:], strict=False))
