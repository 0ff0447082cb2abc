"""labkit.models: tiny reference models shared by several labs.

- :class:`TinyMoE` / :class:`TinyMoEConfig`: a DeepSeek-style MoE decoder (GQA attention
  with a KV cache, RMSNorm, softmax top-k router, shared + routed SwiGLU experts, MTP head),
  every op charged to the current ``labkit.emu`` session.
- :mod:`ops` (``labkit.models.ops``): the charged ops the models are built from (linear,
  attention, swiglu, ...), for lab modules that build a model of their own (``labkit.dspark``).
- :func:`load_tiny_moe`: the shipped weights (trained by ``scripts/train_tiny_moe.py`` on the
  synthetic corpus of :mod:`labkit.models.corpus`) and their :class:`WordTokenizer`.
"""

from . import _ops as ops
from . import corpus
from .store import WEIGHTS_DIR, load_tiny_moe, save_tiny_moe, tiny_moe_meta
from .tiny_moe import MTP, Attention, Block, KVCache, MoE, RMSNorm, TinyMoE, TinyMoEConfig
from .tokenizer import WordTokenizer

__all__ = [
    "MTP",
    "WEIGHTS_DIR",
    "Attention",
    "Block",
    "KVCache",
    "MoE",
    "RMSNorm",
    "TinyMoE",
    "TinyMoEConfig",
    "WordTokenizer",
    "corpus",
    "ops",
    "load_tiny_moe",
    "save_tiny_moe",
    "tiny_moe_meta",
]
