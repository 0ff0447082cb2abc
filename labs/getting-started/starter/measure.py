"""One decode step of a small decoder on the emulated device: prints what it costs.

The sizes below are the model's real sizes (nothing is scaled down), so the session runs at full
scale (``scale=1.0``): the cost model then uses the card's own bandwidth and FLOP/s. A session's
default toy scale (2**-10) is for toy models shrunk by that factor; applied to full-size bytes it
would report a figure 1024x too slow for the weight traffic.
The figures are always emulated (``measurer=False``): this script accounts a step, it computes
nothing, so there is nothing to time on a real NPU."""

from labkit import emu

HIDDEN, FFN, LAYERS = 1024, 2816, 4
BYTES_PER_PARAM = 2  # bf16 weights
MATMULS = {"qkv": (HIDDEN, 3 * HIDDEN), "o": (HIDDEN, HIDDEN), "up": (HIDDEN, 2 * FFN), "down": (FFN, HIDDEN)}


def decode_step(profile: str, graph_mode: bool) -> emu.EmuReport:
    with emu.session(profile, graph_mode=graph_mode, scale=1.0, measurer=False) as s:
        for _ in range(LAYERS):
            for name, (k, n) in MATMULS.items():
                # decode multiplies one token (1 x k) by a k x n weight: reading the weight dominates
                emu.account(f"matmul.{name}", flops=2 * k * n, bytes=k * n * BYTES_PER_PARAM, dtype="bf16")
        return s.report()


weights = LAYERS * sum(k * n for k, n in MATMULS.values()) * BYTES_PER_PARAM
print(
    f"model: {LAYERS} layers, hidden {HIDDEN}, ffn {FFN}, bf16 weights {weights / 1e6:.2f} MB read per token"
)
print(f"{'profile':8} {'mode':6} {'launches':>8} {'weights_ms':>10} {'launch_ms':>9} {'step_ms':>8}")
rows = [("910B", False), ("910B", True), ("950DT", False)]
for profile, graph in rows:
    r = decode_step(profile, graph)
    p = emu.get_profile(profile)
    weights_ms = weights / p.hbm_bandwidth.value * 1e3  # every matmul here is memory-bound
    launch_ms = r.launches * (p.graph_launch_overhead if graph else p.launch_overhead).value * 1e3
    mode = "graph" if graph else "eager"
    print(f"{profile:8} {mode:6} {r.launches:>8} {weights_ms:>10.4f} {launch_ms:>9.4f} {r.elapsed_ms:>8.4f}")
print(f"decode_step_ms = {decode_step('910B', False).elapsed_ms:.4f}")
