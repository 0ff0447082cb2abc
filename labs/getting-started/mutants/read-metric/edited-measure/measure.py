"""One decode-like step on the emulated device (910B profile): prints what it cost."""

from labkit import emu

HIDDEN, FFN, LAYERS = 1024, 2816, 4
BYTES_PER_PARAM = 2  # bf16

with emu.session("910B") as s:
    for _ in range(LAYERS):
        for name, (k, n) in {
            "qkv": (HIDDEN, 3 * HIDDEN),
            "o": (HIDDEN, HIDDEN),
            "up": (HIDDEN, 2 * FFN),
            "down": (FFN, HIDDEN),
        }.items():
            # a decode step multiplies one token (1 x k) by a k x n weight: weight bytes dominate
            emu.account(f"matmul.{name}", flops=2 * k * n, bytes=k * n * BYTES_PER_PARAM)
    print(f"layers = {LAYERS}")
    print(f"decode_step_ms = {s.elapsed_ms():.4f}")
