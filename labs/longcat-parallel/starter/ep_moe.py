"""Step 3: expert-parallel MoE with all-to-all dispatch and combine."""

import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401


def ep_moe(x, ids, w, experts, rank, world):
    """x [T, d] this rank's tokens, ids / w [T, k] their experts and weights. Routed expert e
    (0 <= e < experts.n_routed) lives on rank e // experts.per_rank and only that rank can run
    it: experts(e, rows). ids >= experts.n_routed are zero experts, whose output is the token
    itself. Return y [T, d] = sum_j w_j * E_{ids_j}(x)."""
    raise NotImplementedError("TODO step 3")
