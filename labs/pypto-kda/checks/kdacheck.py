"""Shared helpers of the pypto-kda checkers (trusted side): held-out inputs, the fp64 golden, the
naive Tile-level ops from the lab's pristine starter/, and comparisons that name the mistake."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
LAB_SRC = HERE.parent / "starter"
sys.path.insert(0, str(HERE))
torch.set_num_threads(1)

import kdaref  # noqa: E402
from labkit import tile  # noqa: E402
from labkit.check import Failure, msg, run_function  # noqa: E402

HARNESS = str(HERE / "harness.py")


def run_seed(salt: str) -> int:
    """A seed the attendee has not seen: from LAB_RUN_ID (fixed when unset) and the case."""
    h = hashlib.sha256(f"{os.environ.get('LAB_RUN_ID', 'local')}:{salt}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def inputs(seed: int, H: int, T: int, D: int = 32) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(fp64 inputs for the golden, the same inputs in fp32 for the attendee)."""
    x = kdaref.make_inputs(seed, H=H, T=T, D=D, dtype=torch.float64)
    return x, {n: t.float() for n, t in x.items()}


def golden(x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return kdaref.recurrent_kda(**x)


def compare(
    name: str,
    got: Any,
    ref: torch.Tensor,
    what: str,
    hint: str,
    against: tuple[str, str] = ("the fp64 recurrent reference", "fp64 循环参考结果"),
) -> float:
    """Max abs error of ``got`` vs the fp64 golden, or a Failure naming where it differs."""
    if not isinstance(got, torch.Tensor):
        raise Failure(
            msg(
                f"{what}: `{name}` is {type(got).__name__}, not a tensor.",
                f"{what}：`{name}` 是 {type(got).__name__}，不是张量。",
            ),
            [hint],
        )
    if tuple(got.shape) != tuple(ref.shape):
        raise Failure(
            msg(
                f"{what}: `{name}` has shape {tuple(got.shape)}, expected {tuple(ref.shape)}.",
                f"{what}：`{name}` 的形状是 {tuple(got.shape)}，应为 {tuple(ref.shape)}。",
            ),
            [hint],
        )
    tol = kdaref.tolerance(ref)
    diff = (got.double() - ref).abs()
    diff[torch.isnan(diff)] = float("inf")
    err = float(diff.max())
    if err > tol:
        pos = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])
        bad = int((diff > tol).sum())
        raise Failure(
            msg(
                f"{what}: `{name}` differs from {against[0]} at {pos}: got {float(got[pos]):.6g}, "
                f"expected {float(ref[pos]):.6g}; max abs error {err:.3g} > tolerance {tol:.3g} "
                f"({bad} of {diff.numel()} elements out of tolerance).",
                f"{what}：`{name}` 与{against[1]}在 {pos} 处不同：得到 {float(got[pos]):.6g}，"
                f"应为 {float(ref[pos]):.6g}；最大绝对误差 {err:.3g} > 容差 {tol:.3g}（{diff.numel()} 个元素中 {bad} 个超出容差）。",
            ),
            [hint],
        )
    return err


def call(file: str, func: str, *args: Any, hint: str, timeout: float = 60) -> Any:
    res = run_function(file, func, *args, timeout=timeout, memory_mb=2048)
    if res.error is not None and res.error.type in ("TileBudgetError", "TileError"):
        raise Failure(
            msg(
                f"The emulator stopped your kernel: {res.error.message}",
                f"仿真器中止了你的算子：{res.error.message}",
            )
            + "\n"
            + res.error.format(),
            [hint],
        )
    return res.unwrap(hint)


def naive(name: str) -> ModuleType:
    """The lab's own copy of a naive op (never the workspace's)."""
    spec = importlib.util.spec_from_file_location(f"_pristine_{name}", LAB_SRC / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def naive_prefill_us(x32: dict[str, torch.Tensor], scale: float, chunk: int) -> float:
    H, T, _ = x32["q"].shape
    o, s = torch.zeros(H, T, x32["v"].shape[-1]), torch.zeros_like(x32["s0"])
    k = tile.Kernel("chunk_kda_naive")
    naive("kda_tile_naive").chunk_kda_tile(
        k, x32["q"], x32["k"], x32["v"], x32["g"], x32["beta"], x32["s0"], o, s, scale, chunk
    )
    return float(k.report()["time_us"])


def decode_tokens(x32: dict[str, torch.Tensor], N: int, H: int) -> list[dict[str, torch.Tensor]]:
    """A [N*H, T, ...] input set as T decode tokens of N sequences x H heads."""
    T = x32["q"].shape[1]
    return [
        {n: x32[n][:, t].reshape(N, H, -1).contiguous() for n in ("q", "k", "v", "g")}
        | {"beta": x32["beta"][:, t].reshape(N, H).contiguous()}
        for t in range(T)
    ]


def naive_decode_us(tok: dict[str, torch.Tensor], s0: torch.Tensor, scale: float) -> float:
    N, H, _ = tok["q"].shape
    k = tile.Kernel("kda_decode_naive")
    naive("kda_decode_naive").decode_tile(
        k,
        tok["q"],
        tok["k"],
        tok["v"],
        tok["g"],
        tok["beta"],
        s0.clone(),
        torch.zeros(N, H, tok["v"].shape[-1]),
        scale,
    )
    return float(k.report()["time_us"])
