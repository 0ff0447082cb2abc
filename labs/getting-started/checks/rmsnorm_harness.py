"""Runs in the child process of step 4's check (``run_function``), never in the checker.

It wraps the library RMSNorms (torch's ``rms_norm`` and the fused op of labkit / torch_npu)
before the attendee's ``rmsnorm.py`` is imported, so a ``rms_norm`` that delegates to one of them
is seen and named, then calls the attendee's ``rms_norm`` on every case the checker sent. An
exception in one case is returned as text for that case, so the checker can say which input
broke it."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import traceback
from typing import Any

import labkit.npu
import labkit.npu.norm
import torch
import torch.nn.functional as F

DELEGATED: list[str] = []


def _spy(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if name not in DELEGATED:
            DELEGATED.append(name)
        return fn(*args, **kwargs)

    return wrapper


def _install() -> None:
    torch.rms_norm = _spy("torch.rms_norm", torch.rms_norm)  # type: ignore[attr-defined]
    F.rms_norm = _spy("torch.nn.functional.rms_norm", F.rms_norm)  # torch.nn.RMSNorm calls this too
    fused = _spy("labkit.npu.npu_rms_norm", labkit.npu.npu_rms_norm)
    labkit.npu.npu_rms_norm = fused  # type: ignore[assignment]
    labkit.npu.norm.npu_rms_norm = fused  # type: ignore[assignment]
    if "torch_npu" in sys.modules:
        tn = sys.modules["torch_npu"]
        if hasattr(tn, "npu_rms_norm"):
            tn.npu_rms_norm = _spy("torch_npu.npu_rms_norm", tn.npu_rms_norm)


_install()


def _where(exc: BaseException) -> str:
    lab = os.getcwd()
    frames = [
        f"{os.path.relpath(f.filename, lab)}:{f.lineno}: {(f.line or '').strip()}"
        for f in traceback.extract_tb(exc.__traceback__)
        if os.path.abspath(f.filename).startswith(lab + os.sep)
    ]
    return "; ".join(frames[-2:])


def run_cases(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """``[{"x", "w", "eps"}]`` -> ``{"results": [{"y", "rstd"} | {"value"} | {"error"}], "delegated"}``."""
    rmsnorm = importlib.import_module("rmsnorm")
    results: list[dict[str, Any]] = []
    for case in cases:
        try:
            out = rmsnorm.rms_norm(case["x"].clone(), case["w"].clone(), case["eps"])
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}", "where": _where(exc)})
            continue
        if isinstance(out, tuple | list) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out):
            results.append({"y": out[0].detach().cpu(), "rstd": out[1].detach().cpu()})
        else:
            results.append(
                {
                    "value": type(out).__name__
                    if not isinstance(out, tuple | list)
                    else f"{type(out).__name__} of {len(out)}"
                }
            )
    return {"results": results, "delegated": list(DELEGATED)}
