"""dsv4flash: a DeepSeek-V4-Flash-shaped toy (4 layers x 256 experts, top-6 + 1 shared).

- :mod:`.config`: the shape, the real model's figures, the emulation scale;
- :mod:`.mxfp4`: MXFP4 (checkpoint and GGUF layouts) and Q8_0;
- :mod:`.model`: checkpoint loading and the reference forward pass (no offload);
- :mod:`.corpus`: the topic text prompts are made of;
- :mod:`.make_weights`: the seeded script that generated ``weights/``.
"""

from .config import REAL, ModelConfig, toy_scale
from .corpus import Tokenizer, make_prompt, vocabulary
from .model import Checkpoint, Reference

__all__ = [
    "REAL",
    "Checkpoint",
    "ModelConfig",
    "Reference",
    "Tokenizer",
    "make_prompt",
    "toy_scale",
    "vocabulary",
]
