"""Fused RMSNorm written in Triton for CUDA GPUs (upstream's fast path; needs `triton`)."""

from __future__ import annotations

import triton  # noqa: F401  -- not available on Ascend / CPU: the NPU patch removes this import


def use_triton_rms_norm(model):  # type: ignore[no-untyped-def]
    raise NotImplementedError("the Triton kernel runs on CUDA GPUs only")
