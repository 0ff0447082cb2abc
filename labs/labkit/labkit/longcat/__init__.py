"""labkit.longcat: the tiny zero-expert MoE and the full-size decode timeline of the
longcat-parallel lab (docs/labs/longcat-parallel.md).

- :mod:`labkit.longcat.model`: ``TinyLongcat`` (seeded weights, zero experts, pluggable attention
  and MoE) and ``causal_attention``, the single-process references;
- :mod:`labkit.longcat.plan`: the full-size LongCat 2.0 figures, the A2 cluster, the op list of a
  decode step per DP x EP plan and its emulated timeline with weight prefetch.
"""

from .model import TinyLongcat, TinyLongcatConfig, causal_attention, rms_norm
from .plan import (
    CLUSTER_A2,
    LONGCAT,
    Cluster,
    LongcatConfig,
    Op,
    Prefetch,
    Timeline,
    decode_ops,
    op_window,
    timeline,
)

__all__ = [
    "CLUSTER_A2",
    "LONGCAT",
    "Cluster",
    "LongcatConfig",
    "Op",
    "Prefetch",
    "Timeline",
    "TinyLongcat",
    "TinyLongcatConfig",
    "causal_attention",
    "decode_ops",
    "op_window",
    "rms_norm",
    "timeline",
]
