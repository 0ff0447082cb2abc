"""Saving and loading tiny-model weights: ``<name>.safetensors`` + ``<name>.json`` (config,
vocabulary, training record) in ``labkit/models/weights/``. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from .tiny_moe import TinyMoE, TinyMoEConfig
from .tokenizer import WordTokenizer

WEIGHTS_DIR = Path(__file__).parent / "weights"
TINY_MOE = "tiny_moe"


def save_tiny_moe(
    model: TinyMoE, tokenizer: WordTokenizer, path: Path, meta: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """Write ``path.safetensors`` and ``path.json``; returns both paths."""
    path = Path(path)
    st, js = path.with_suffix(".safetensors"), path.with_suffix(".json")
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(st), metadata={"format": "pt", "model": "TinyMoE"})
    js.write_text(
        json.dumps(
            {"config": model.cfg.to_dict(), "vocab": tokenizer.to_list(), "meta": meta or {}}, indent=1
        )
    )
    return st, js


def load_tiny_moe(
    path: Path | str | None = None, *, dtype: torch.dtype = torch.float32
) -> tuple[TinyMoE, WordTokenizer]:
    """The shipped trained model (or the one at ``path``) in eval mode, and its tokenizer."""
    base = WEIGHTS_DIR / TINY_MOE if path is None else Path(path)
    st, js = base.with_suffix(".safetensors"), base.with_suffix(".json")
    if not st.exists() or not js.exists():
        raise FileNotFoundError(
            f"tiny MoE weights not found at {st}; run labs/labkit/scripts/train_tiny_moe.py to make them"
        )
    info = json.loads(js.read_text())
    model = TinyMoE(TinyMoEConfig.from_dict(info["config"]))
    model.load_state_dict(load_file(str(st)))
    model.eval()
    return model.to(dtype), WordTokenizer.from_list(info["vocab"])


def tiny_moe_meta(path: Path | str | None = None) -> dict[str, Any]:
    """The training record stored beside the shipped weights (steps, losses, corpus seed)."""
    base = WEIGHTS_DIR / TINY_MOE if path is None else Path(path)
    meta: dict[str, Any] = json.loads(base.with_suffix(".json").read_text())["meta"]
    return meta
