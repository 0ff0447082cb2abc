"""Given: the models, the emulated device and the prompts. You do not need to change this file.

- ``load_models()`` -> (target, drafter, tokenizer): labkit's tiny MoE (the *target*, with its
  MTP head) and the lab's block drafter (``weights/drafter.*``, trained by
  ``training/train_drafter.py`` on the target's own greedy text).
- ``session()``: the emulated Ascend 950DT in graph mode (the recipe runs npugraph_ex); every
  op the models run inside it is charged to the emulated device.
- ``prefill_ms(target, prompt_ids)``: emulated time of the target's prefill, so TPOT counts
  decode only.
"""

from __future__ import annotations

from pathlib import Path

import torch
from labkit import emu
from labkit.dspark import BlockDrafter, load_drafter
from labkit.models import TinyMoE, WordTokenizer, corpus, load_tiny_moe

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE.parent / "weights" / "drafter"
PROFILE = "950DT"
GRAPH_MODE = True


def load_models() -> tuple[TinyMoE, BlockDrafter, WordTokenizer]:
    torch.set_num_threads(1)
    target, tok = load_tiny_moe()
    return target, load_drafter(WEIGHTS), tok


def session() -> emu.EmuSession:
    # always emulated, also where labkit sees a card: the figures are the 950DT's, and the
    # models run on CPU tensors (a measured session would time the CPU)
    return emu.session(PROFILE, graph_mode=GRAPH_MODE, measurer=False)


@torch.no_grad()
def prefill_ms(target: TinyMoE, prompt_ids: list[int]) -> float:
    with session() as s:
        target(torch.tensor([prompt_ids]), target.new_cache(1, len(prompt_ids)))
        return s.elapsed_ms()


def prompts(tok: WordTokenizer, seed: int, n: int) -> list[list[int]]:
    """``n`` corpus prompts (a paragraph's start, 6-16 words), reproducible by ``seed``."""
    import random

    rng = random.Random(seed)
    out = []
    for p in corpus.make_corpus(n, seed=seed):
        ids = tok.encode(p.text, bos=True)
        out.append(ids[: rng.randint(6, 16)])
    return out
