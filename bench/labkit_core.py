"""Figures for labkit's core pieces (prints numbers; never asserted in tests).

- ``labkit.check.run_function``: wall time of one isolated call (child start + import torch +
  call + safe return), and of the verdict round trip of a whole checker;
- ``labkit.mx``: quantize / dequantize throughput and bytes per element;
- ``labkit.npu``: CPU reference time of the fused ops at a toy size.

Run: ``.venv/bin/python bench/labkit_core.py``
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch
from labkit import mx
from labkit.check import run_function
from labkit.npu import npu_fused_infer_attention_score, npu_rms_norm, npu_swiglu


def _timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_run_function() -> None:
    with tempfile.TemporaryDirectory() as lab:
        Path(lab, "model.py").write_text("import torch\ndef f(x):\n    return x * 2\n")
        cwd = os.getcwd()
        os.chdir(lab)
        try:
            x = torch.randn(256, 256)
            t = _timed(lambda: run_function("model.py", "f", x).unwrap(), 5)
            print(f"run_function round trip (256x256 tensor): {t * 1000:.0f} ms median of 5")
        finally:
            os.chdir(cwd)
        checker = Path(lab, "check.py")
        checker.write_text(
            textwrap.dedent("""
            from labkit.check import main, run_function
            main(lambda: ("ok", {"v": float(run_function("model.py", "f", 1.0).unwrap())}))
        """)
        )
        r, w = os.pipe()
        env = dict(os.environ, LAB_RESULT_FD=str(w))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", str(checker)], cwd=lab, env=env, pass_fds=(w,), check=True)
        os.close(w)
        elapsed = time.perf_counter() - t0
        verdict = os.read(r, 4096).decode().strip()
        os.close(r)
        print(f"whole checker (python -I + one run_function + verdict): {elapsed * 1000:.0f} ms -> {verdict}")


def bench_mx() -> None:
    w = torch.randn(1024, 1024)
    for fmt in ("mxfp4", "mxfp8_e4m3"):
        tq = _timed(lambda fmt=fmt: mx.quantize_mx(w, fmt), 3)
        q = mx.quantize_mx(w, fmt)
        td = _timed(q.dequantize, 3)
        print(
            f"{fmt}: quantize {w.numel() / tq / 1e6:.1f} M elem/s, dequantize {w.numel() / td / 1e6:.1f} M elem/s, "
            f"{q.nbytes / q.numel:.5f} B/elem ({w.numel() * 4 / q.nbytes:.2f}x smaller than fp32)"
        )


def bench_npu() -> None:
    x = torch.randn(64, 1024)
    g = torch.ones(1024)
    print(f"npu_rms_norm [64, 1024]: {_timed(lambda: npu_rms_norm(x, g), 20) * 1e6:.0f} us")
    print(f"npu_swiglu [64, 2048]: {_timed(lambda: npu_swiglu(torch.randn(64, 2048)), 20) * 1e6:.0f} us")
    q = torch.randn(1, 8, 128, 64)
    t = _timed(
        lambda: npu_fused_infer_attention_score(q, q, q, num_heads=8, input_layout="BNSD", sparse_mode=3), 10
    )
    print(f"npu_fused_infer_attention_score causal B1 N8 S128 D64: {t * 1e3:.2f} ms")


if __name__ == "__main__":
    torch.set_num_threads(1)
    bench_mx()
    bench_npu()
    bench_run_function()
