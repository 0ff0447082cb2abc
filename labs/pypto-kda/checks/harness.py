"""Trusted harness the pypto-kda checkers run in a child process (labkit.check.run_function with
this file's absolute path): it builds the emulated kernel and the GM tensors, calls the attendee's
Tile-level function and sends back the outputs with the kernel's report (computed here by labkit)."""

from __future__ import annotations

from typing import Any

import torch
from labkit import tile

torch.set_num_threads(1)


def run_matmul(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    from tile_matmul import tiled_matmul

    out = torch.full((a.shape[0], b.shape[1]), float("nan"))
    k = tile.Kernel("matmul")
    tiled_matmul(k, a, b, out)
    return {"out": out, "report": k.report()}


def run_inverse(a: torch.Tensor) -> dict[str, Any]:
    from tril_inverse import tril_inverse

    C = a.shape[0]
    out = torch.full((C, C), float("nan"))
    k = tile.Kernel("tril_inverse")
    with k.task("inverse") as task:
        at = k.load(a, "UB", "A")
        x = tril_inverse(k, at)
        if not isinstance(x, tile.Tile):
            raise TypeError(f"tril_inverse must return a Tile, got {type(x).__name__}")
        # what the function leaves allocated besides its input and its result: held until the task ends
        left = [(t.name, t.buf, t.nbytes) for t in task.live if t is not at and t is not (x.owner or x)]
        k.store(x, out)
    return {"out": out, "report": k.report(), "left": left}


def run_prefill(x: dict[str, torch.Tensor], scale: float, chunk: int) -> dict[str, Any]:
    from kda_tile import chunk_kda_tile

    H, T, _ = x["q"].shape
    o = torch.full((H, T, x["v"].shape[-1]), float("nan"))
    s = torch.full_like(x["s0"], float("nan"))
    k = tile.Kernel("chunk_kda")
    chunk_kda_tile(k, x["q"], x["k"], x["v"], x["g"], x["beta"], x["s0"], o, s, scale, chunk)
    return {"o": o, "s": s, "report": k.report()}


def run_decode(tokens: list[dict[str, torch.Tensor]], s0: torch.Tensor, scale: float) -> dict[str, Any]:
    """Every token in turn through the attendee's decode op; the report is the last token's."""
    from kda_decode import decode_tile

    S = s0.clone()
    outs = []
    rep: dict[str, Any] = {}
    for t in tokens:
        N, H, _ = t["q"].shape
        o = torch.full((N, H, t["v"].shape[-1]), float("nan"))
        k = tile.Kernel("kda_decode")
        decode_tile(k, t["q"], t["k"], t["v"], t["g"], t["beta"], S, o, scale)
        outs.append(o)
        rep = k.report()
    return {"o": torch.stack(outs), "s": S, "report": rep}


def chunk_calls(x: dict[str, torch.Tensor], scale: float, chunks: list[int]) -> list[int]:
    """How many torch calls chunk_kda makes for each chunk size: a chunked form's count follows the
    number of chunks, a token-by-token loop's does not depend on the chunk size at all."""
    from kda_chunk import chunk_kda
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    out = []
    for c in chunks:
        Count.calls = 0
        with Count():
            chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], x["s0"], scale, c)
        out.append(Count.calls)
    return out
