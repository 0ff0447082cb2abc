"""Step 4: pipeline stages for prefill, micro-batched, and the bubble it leaves."""

import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401
from labkit import dist as ldist  # noqa: F401


def pipeline_prefill(x, n_micro, stage, rank, world):
    """Rank r is stage r: stage(mb) runs its layers on a micro-batch [n, S, d] (and advances
    this rank's emulated clock). x [B, S, d] is the input on rank 0; the other ranks get a
    tensor of its shape with no data. Split the batch into n_micro micro-batches with
    torch.tensor_split. Return (output [B, S, d] on the last rank else None, bubble fraction
    measured on the emulated clocks, the same on every rank)."""
    raise NotImplementedError("TODO step 4")
