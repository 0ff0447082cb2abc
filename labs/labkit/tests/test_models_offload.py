"""The tiny MoE and labkit.emu together, the way the offload lab uses them: hot experts resident
on a device too small for the whole model, cold experts computed on the host on a side stream."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from labkit import emu
from labkit.models import load_tiny_moe
from labkit.models.analysis import hot_sets, routing_counts

PROMPT = "the probe orbits mars every four days . astronauts on the station watched"
SCALE = 2.0**-15  # 64 GiB -> 2 MiB: the whole 3.7 MB model does not fit, attention + hot experts do


@pytest.fixture(scope="module")
def shipped():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_tiny_moe()
    torch.set_num_threads(before)


def _resident(model, hot: torch.Tensor) -> dict[str, int]:
    out = {}
    for tag, n in model.weight_groups().items():
        if tag == "mtp":
            continue  # unused in plain decoding
        if ".expert." in tag:
            layer, e = int(tag.split(".")[1]), int(tag.split(".")[3])
            if e not in hot[layer].tolist():
                continue
        out[tag] = n
    return out


def offload_decode(model, ids: list[int], hot: torch.Tensor, n_tokens: int, side_stream: bool):
    """Greedy decode with cold experts on the host; returns (tokens, report, hits, slots)."""
    hits = [0, 0]
    with emu.session("910B", scale=SCALE, measurer=False) as s:
        for tag, n in _resident(model, hot).items():
            s.memory.alloc(tag, n)
        originals = {}
        for moe in model.moe_layers:

            def routed(x, w, idx, moe=moe):
                resident = set(hot[moe.layer].tolist())
                out = torch.zeros_like(x)
                picks = [(j, int(idx[0, j])) for j in range(idx.shape[1])]
                cold = [(j, e) for j, e in picks if e not in resident]
                with s.stream("cpu") if side_stream else nullcontext(), s.on_host():
                    for j, e in cold:
                        out = out + w[0, j] * moe.expert(e, x)
                for j, e in picks:
                    if e in resident:
                        out = out + w[0, j] * moe.expert(e, x)
                if side_stream:
                    s.wait_stream("cpu")
                hits[0] += len(picks) - len(cold)
                hits[1] += len(picks)
                return out

            originals[moe] = moe.routed
            moe.routed = routed
        try:
            cache = model.new_cache()
            with torch.no_grad():
                with s.paused():  # prefill is not what this test measures
                    logits = model(torch.tensor([ids]), cache)
                hits[0] = hits[1] = 0
                start = s.elapsed_ms()
                out = []
                for _ in range(n_tokens):
                    out.append(int(logits[0, -1].argmax()))
                    logits = model(torch.tensor([[out[-1]]]), cache)
                s.synchronize()
                per_token = (s.elapsed_ms() - start) / n_tokens
        finally:
            for moe, fn in originals.items():
                moe.routed = fn
        return out, s.report(), per_token, hits[0] / hits[1]


def test_offloaded_decode_is_exact_fits_the_budget_and_overlap_pays(shipped):
    model, tok = shipped
    ids = tok.encode(PROMPT, bos=True)
    reference = model.generate(ids, max_new_tokens=16)

    dynamic = hot_sets(routing_counts(model, [ids]), 8)  # residency from the prompt's own routing
    static = torch.arange(8).repeat(model.cfg.n_layers, 1)  # "the first 8 experts"

    toks, rep, serial_ms, hit_dyn = offload_decode(model, ids, dynamic, 16, side_stream=False)
    toks2, rep2, overlap_ms, _ = offload_decode(model, ids, dynamic, 16, side_stream=True)
    toks3, _, static_ms, hit_static = offload_decode(model, ids, static, 16, side_stream=True)
    print(
        f"hot-hit ratio dynamic {hit_dyn:.3f} vs static {hit_static:.3f}; emulated ms/token: "
        f"serial {serial_ms:.3f}, side stream {overlap_ms:.3f}, static hot set {static_ms:.3f}; "
        f"peak {rep2.peak_memory_bytes} of {rep2.capacity_bytes} B"
    )
    assert toks == toks2 == toks3 == reference  # where an expert runs never changes the result
    assert rep2.peak_memory_bytes <= rep2.capacity_bytes
    assert rep2.ops["expert_gate_up"].engine == "mixed"  # some on the host, some on the device
    assert rep2.streams["cpu"].busy_ms > 0 and rep2.overlap_ms > 0
    assert overlap_ms < serial_ms
    assert hit_dyn > hit_static
    assert static_ms > overlap_ms  # fewer hits, more host work

    with emu.session("910B", scale=SCALE, measurer=False) as s, pytest.raises(emu.OutOfDeviceMemory) as exc:
        for tag, n in model.weight_groups().items():
            s.memory.alloc(tag, n)
    assert "biggest holders" in str(exc.value)
