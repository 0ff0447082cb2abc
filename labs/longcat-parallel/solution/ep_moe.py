"""Step 3: expert-parallel MoE with all-to-all dispatch and combine; zero experts stay home."""

import torch
import torch.distributed as dist


def ep_moe(x, ids, w, experts, rank, world):
    """x [T, d] this rank's tokens, ids / w [T, k] their experts and weights. Routed expert e
    lives on rank e // experts.per_rank; ids >= experts.n_routed are zero experts (E(x) = x).
    Return y [T, d] = sum_j w_j * E_{ids_j}(x)."""
    d = x.shape[1]
    zero = ids >= experts.n_routed
    # zero experts: the token itself, weighted, no dispatch and no compute
    y = (x.unsqueeze(1) * (w * zero).unsqueeze(-1)).sum(1)
    tok, slot = (~zero).nonzero(as_tuple=True)
    e = ids[tok, slot]
    dest = e // experts.per_rank
    order = torch.argsort(dest, stable=True)
    tok, slot, e, dest = tok[order], slot[order], e[order], dest[order]
    send_counts = torch.bincount(dest, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sc, rc = send_counts.tolist(), recv_counts.tolist()
    payload = torch.cat([x[tok], e.unsqueeze(1).to(x.dtype)], 1)
    got = torch.empty(sum(rc), d + 1)
    dist.all_to_all_single(got, payload, output_split_sizes=rc, input_split_sizes=sc)
    rows, eids = got[:, :d], got[:, d].long()
    out = torch.empty_like(rows)
    for ex in eids.unique().tolist():
        sel = eids == ex
        out[sel] = experts(ex, rows[sel])
    back = torch.empty(sum(sc), d)
    dist.all_to_all_single(back, out, output_split_sizes=sc, input_split_sizes=rc)
    y.index_add_(0, tok, back * w[tok, slot].unsqueeze(-1))
    return y
