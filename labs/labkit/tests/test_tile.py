"""labkit.tile: budgets, buffers, the cost model and the dependency-driven schedule."""

from __future__ import annotations

import pytest
import torch
from labkit import tile


def _matmul_task(
    k: tile.Kernel, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, name: str, *idx: int
) -> None:
    with k.task(name, *idx):
        a0 = k.move(k.load(a, "L1", "a"), "L0A")
        b0 = k.move(k.load(b, "L1", "b"), "L0B")
        k.store(k.matmul(a0, b0), out)


def test_a_tile_over_budget_names_the_tile_and_the_buffer() -> None:
    k = tile.Kernel()
    with pytest.raises(tile.TileBudgetError) as e, k.task("t"):
        k.load(torch.zeros(64, 64), "UB", "small")  # 16 KiB
        k.load(torch.zeros(256, 180), "UB", "big")  # 180 KiB: 196 > 184
    assert e.value.tile == "big" and e.value.buffer == "UB"
    assert "'big'" in str(e.value) and "UB" in str(e.value) and "'small'" in str(e.value)


def test_budgets_are_the_a2_a3_sizes_and_fit_exactly() -> None:
    assert tile.BUFFERS == {
        "UB": 184 * 1024,
        "L1": 512 * 1024,
        "L0A": 64 * 1024,
        "L0B": 64 * 1024,
        "L0C": 128 * 1024,
    }
    k = tile.Kernel()
    with k.task("t"):
        t = k.load(torch.zeros(128, 128), "L1")  # 64 KiB
        k.move(t, "L0A")  # exactly 64 KiB fits
        with pytest.raises(tile.TileBudgetError):
            k.move(t[:1], "L0A")


def test_free_and_task_end_give_the_bytes_back() -> None:
    k = tile.Kernel()
    for i in range(3):
        with k.task("t", i):
            t = k.load(torch.zeros(256, 128), "UB")  # 128 KiB
            k.free(t)
            k.load(torch.zeros(256, 128), "UB")
    assert k.peak["UB"] == 128 * 1024


def test_ops_need_their_buffers_and_a_task() -> None:
    k = tile.Kernel()
    with pytest.raises(tile.TileError, match="outside a task"):
        k.load(torch.zeros(2, 2))
    with k.task("t"):
        a = k.load(torch.zeros(4, 4), "UB")
        with pytest.raises(tile.TileError, match="L0A"):
            k.matmul(a, a)
        l1 = k.load(torch.zeros(4, 4), "L1")
        with pytest.raises(tile.TileError, match="UB"):
            k.exp(l1)
        with pytest.raises(tile.TileError, match="load into L0A"):
            k.load(torch.zeros(4, 4), "L0A")


def test_matmul_is_right_and_an_m1_product_costs_a_whole_fractal() -> None:
    a, b = torch.randn(16, 32), torch.randn(32, 16)
    out = torch.zeros(16, 16)
    k16 = tile.Kernel()
    _matmul_task(k16, a, b, out, "mm")
    assert torch.allclose(out, a @ b, atol=1e-5)
    k1 = tile.Kernel()
    _matmul_task(k1, a[:1], b, torch.zeros(1, 16), "mm")
    assert k1.tasks[0].cube_s == pytest.approx(k16.tasks[0].cube_s)
    assert k1.cube_flops * 16 == k16.cube_flops


def test_independent_tasks_overlap_and_dependent_ones_wait() -> None:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    out = torch.zeros(128, 128)
    k = tile.Kernel()
    for i in range(2):  # disjoint strided blocks of one GM tensor: no dependency
        for j in range(2):
            _matmul_task(k, a, b, out[64 * i : 64 * (i + 1), 64 * j : 64 * (j + 1)], "mm", i, j)
    r = k.report()
    assert r["max_parallel"] == 4
    assert r["time_us"] == pytest.approx(k.tasks[0].end * 1e6)
    chain = tile.Kernel()
    x = torch.randn(64, 64)
    for i in range(3):  # each task reads what the previous one wrote
        _matmul_task(chain, x, b, x, "step", i)
    chain.report()
    assert chain.tasks[1].start == pytest.approx(chain.tasks[0].end)
    assert chain.tasks[2].start == pytest.approx(chain.tasks[1].end)


def test_tasks_fill_the_cores_then_queue() -> None:
    k = tile.Kernel(profile="910B3")
    src = torch.randn(45, 64)
    dst = torch.zeros(45, 64)
    for i in range(45):
        with k.task("v", i):
            k.store(k.exp(k.load(src[i], "UB")), dst[i])
    r = k.report()
    assert r["max_parallel"] == 40  # the 910B3's 40 Vector cores
    assert r["time_us"] == pytest.approx(2 * k.tasks[0].end * 1e6)
    assert torch.allclose(dst, src.exp())


def test_cross_core_moves_cost_more_than_on_chip_moves() -> None:
    k = tile.Kernel()
    with k.task("t") as t:
        l1 = k.load(torch.zeros(32, 32), "L1")
        before = t.move_s
        k.move(l1, "L0A")
        onchip = t.move_s - before
        ub = k.load(torch.zeros(32, 32), "UB")
        before = t.move_s
        k.move(ub, "L0B")
        cross = t.move_s - before
    assert cross > 5 * onchip
    assert k.moves["L1->L0A"] == 1 and k.moves["UB->L0B"] == 1


def test_the_report_is_deterministic() -> None:
    def run() -> dict:
        k = tile.Kernel()
        a, b = torch.ones(64, 64), torch.ones(64, 64)
        out = torch.zeros(64, 128)
        _matmul_task(k, a, b, out[:, :64], "mm", 0)
        with k.task("v"):
            k.store(k.exp(k.load(out[:, :64], "UB")), out[:, 64:])
        return k.report()

    r1, r2 = run(), run()
    assert r1 == r2
    assert 0 < r1["cube_share"] < 1 and r1["tasks"] == 2 and r1["subgraphs"] == 2
