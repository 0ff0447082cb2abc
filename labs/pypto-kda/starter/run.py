"""Try a step on your own inputs: python run.py matmul|recurrent|chunk|inverse|tile|decode

It compares with a float64 run of your own recurrent_kda (step 2) where it can, and prints the
emulated kernel's report (time, tasks, moves, Cube share, peak bytes per buffer)."""

from __future__ import annotations

import json
import sys

import torch
from kda_data import make_inputs
from labkit import tile


def show(k: tile.Kernel) -> None:
    r = k.report()
    keep = (
        "time_us",
        "tasks",
        "subgraphs",
        "cube_share",
        "moves",
        "move_bytes",
        "matmul_m",
        "max_parallel",
        "utilisation",
        "peak_bytes",
    )
    print(json.dumps({n: r[n] for n in keep}, indent=1))


def golden(x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    from kda_recurrent import recurrent_kda

    d = {n: t.double() for n, t in x.items()}
    return recurrent_kda(d["q"], d["k"], d["v"], d["g"], d["beta"], d["s0"], d["q"].shape[-1] ** -0.5)


def main(what: str) -> None:
    torch.manual_seed(0)
    if what == "matmul":
        from tile_matmul import tiled_matmul

        a, b = torch.randn(256, 192), torch.randn(192, 320)
        out = torch.zeros(256, 320)
        k = tile.Kernel("matmul")
        tiled_matmul(k, a, b, out)
        print("max abs error", float((out - a @ b).abs().max()))
        show(k)
        return
    if what == "inverse":
        from tril_inverse import tril_inverse

        a = torch.tril(0.2 * torch.randn(64, 64), -1)
        out = torch.zeros(64, 64)
        k = tile.Kernel("tril_inverse")
        with k.task("inverse"):
            k.store(tril_inverse(k, k.load(a, "UB", "A")), out)
        print("max abs error", float((out - torch.linalg.inv(torch.eye(64) + a)).abs().max()))
        show(k)
        return
    x = make_inputs(0, H=2, T=200)
    scale = x["q"].shape[-1] ** -0.5
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["s0"])
    if what == "recurrent":
        from kda_recurrent import recurrent_kda

        o, S = recurrent_kda(*args, scale)
        print("o", tuple(o.shape), o.dtype, "S", tuple(S.shape), S.dtype)
        return
    ref_o, ref_s = golden(x)
    if what == "chunk":
        from kda_chunk import chunk_kda

        o, S = chunk_kda(*args, scale, 64)
        print("max abs error o", float((o - ref_o).abs().max()), "S", float((S - ref_s).abs().max()))
        return
    if what == "tile":
        from kda_tile import chunk_kda_tile
        from kda_tile_naive import chunk_kda_tile as naive

        for name, fn in (("naive", naive), ("yours", chunk_kda_tile)):
            o, S = torch.zeros_like(x["v"]), torch.zeros_like(x["s0"])
            k = tile.Kernel(name)
            fn(k, *args, o, S, scale, 64)
            print(
                name, "max abs error o", float((o - ref_o).abs().max()), "S", float((S - ref_s).abs().max())
            )
            show(k)
        return
    if what == "decode":
        from kda_decode import decode_tile
        from kda_decode_naive import decode_tile as naive

        N, H, D = 32, 4, 32
        y = make_inputs(1, H=N * H, T=1)
        tok = [y[n][:, 0].reshape(N, H, -1).contiguous() for n in ("q", "k", "v", "g")]
        beta = y["beta"][:, 0].reshape(N, H).contiguous()
        ref_o, ref_s = golden(y)
        for name, fn in (("naive", naive), ("yours", decode_tile)):
            S = y["s0"].reshape(N, H, D, D).clone()
            o = torch.zeros(N, H, D)
            k = tile.Kernel(name)
            fn(k, *tok, beta, S, o, D**-0.5)
            print(name, "max abs error o", float((o.reshape(N * H, D) - ref_o[:, 0]).abs().max()))
            show(k)
        return
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
