"""Step 5: emulated throughput of the baseline (batch that fits with the whole KV on the
device) against the pooled offload at twice that batch, printed beside the talk's table."""

from __future__ import annotations

import torch
from labkit import dsa, emu

from kvoff.baseline import DeviceKV, max_batch, tokens_per_s
from kvoff.pool import SetAssocFIFO
from kvoff.pooled import PooledKV

PROMPT, STEPS, WARMUP = 1024, 32, 8


def run(store, batch: int, seed: int) -> float:
    model = dsa.ToyDSA()
    tokens = dsa.make_batch(seed, batch, PROMPT + STEPS)
    kv, idx = dsa.prefill_batch(model, tokens[:, :PROMPT])
    with emu.session(dsa.LAB_PROFILE, graph_mode=True, scale=dsa.LAB_SCALE, measurer=False) as s:
        dsa.run_decode(model, kv, idx, tokens[:, PROMPT:], store, warmup=WARMUP)
        return s.elapsed_ms()


def throughput(seed: int = 1, n_slots: int = 256) -> dict[str, float]:
    """Baseline: ``DeviceKV`` at the largest batch that fits the emulated device; offload:
    ``PooledKV(SetAssocFIFO, n_slots)`` at twice that batch, its refill on the side stream and, for
    comparison, on the main stream. Tok/s over the timed steps (``STEPS - WARMUP``);
    ``hidden_ms``: the emulated time the side stream saves over the run."""
    cfg = dsa.DSAConfig()
    with emu.session(dsa.LAB_PROFILE, scale=dsa.LAB_SCALE, measurer=False) as s:
        capacity = s.memory.capacity
    b0 = max_batch(cfg, capacity, PROMPT + STEPS)
    base = tokens_per_s(b0, STEPS - WARMUP, run(DeviceKV(), b0, seed))
    main = tokens_per_s(
        2 * b0, STEPS - WARMUP, run(PooledKV(SetAssocFIFO, n_slots, side_stream=False), 2 * b0, seed)
    )
    side = tokens_per_s(
        2 * b0, STEPS - WARMUP, run(PooledKV(SetAssocFIFO, n_slots, side_stream=True), 2 * b0, seed)
    )
    hidden_ms = (2 * b0 * (STEPS - WARMUP)) * (1e3 / main - 1e3 / side)
    return {
        "baseline_batch": b0,
        "baseline_tok_s": base,
        "offload_batch": 2 * b0,
        "offload_tok_s": side,
        "main_stream_tok_s": main,
        "gain": side / base - 1,
        "hidden_ms": hidden_ms,
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    r = throughput()
    print(f"{'':24}{'toy (emulated)':>18}{'talk (GE graph, 16K pool)':>28}")
    print(f"{'baseline batch':24}{r['baseline_batch']:>18}{64:>28}")
    print(f"{'baseline tok/s':24}{r['baseline_tok_s']:>18.1f}{2427:>28}")
    print(f"{'offload batch':24}{r['offload_batch']:>18}{128:>28}")
    print(f"{'offload tok/s':24}{r['offload_tok_s']:>18.1f}{3755:>28}")
    print(f"{'gain':24}{r['gain']:>18.1%}{'+54.8%':>28}")
    print(f"{'refill on main stream':24}{r['main_stream_tok_s']:>18.1f}{'':>28}")
    print(f"refill hidden by the side stream: {r['hidden_ms']:.2f} ms over the run")
