"""Step 4: pipeline stages for prefill, micro-batched, and the bubble it leaves."""

import torch
import torch.distributed as dist
from labkit import dist as ldist


def pipeline_prefill(x, n_micro, stage, rank, world):
    """Rank r is stage r. x [B, S, d] is the input on rank 0 (other ranks get its shape only).
    Split the batch into n_micro micro-batches (torch.tensor_split), run them through the stages,
    return (output [B, S, d] on the last rank else None, measured bubble fraction)."""
    sizes = [t.shape[0] for t in torch.tensor_split(torch.empty(x.shape[0]), n_micro)]
    outs = []
    start = 0
    for n in sizes:
        if rank == 0:
            mb = x[start : start + n].contiguous()
        else:
            mb = torch.empty(n, *x.shape[1:])
            dist.recv(mb, rank - 1)
        y = stage(mb)
        if rank < world - 1:
            dist.send(y.contiguous(), rank + 1)  # at once: the next stage starts while this one goes on
        outs.append(y)
        start += n
    end = torch.tensor([ldist.now()], dtype=torch.float64)
    busy = torch.tensor([ldist.busy()], dtype=torch.float64)
    dist.all_reduce(end, op=dist.ReduceOp.MAX)
    dist.all_reduce(busy)
    bubble = 1 - float(busy) / (world * float(end))
    return (torch.cat(outs) if rank == world - 1 else None), bubble
