"""Step 5: prefetch the next weights into L2 while ops that leave the HBM idle run."""

from labkit.longcat import CLUSTER_A2, Prefetch, decode_ops, op_window, timeline


def plan_prefetch(ops, cluster=CLUSTER_A2):
    """A list of Prefetch(host, target, bytes) for the decode step `ops`."""
    bw = cluster.hbm_bw
    left = [op.weight_bytes for op in ops]
    plan = []
    for i, op in enumerate(ops):
        d, mem, bound = op_window(op, cluster)
        if bound == "memory":  # its own reads keep the HBM busy: no room, and they would contend
            continue
        room = bw * (d - mem)  # bytes that fit while the HBM is idle during this op
        j = next((j for j in range(i + 1, len(ops)) if left[j] > 0), None)
        if j is None or room <= 0:
            continue
        take = min(room, left[j], cluster.l2_bytes)
        left[j] -= take
        plan.append(Prefetch(i, j, take))
    return plan


def report(plans):
    """{"DP128-EP128": {"tpot_ms": ..., "tpot_prefetch_ms": ...}, ...} for (cards, dp, ep, batch, context) plans."""
    out = {}
    for cards, dp, ep, batch, context in plans:
        ops = decode_ops(dp, ep, batch, context, tp=cards // dp)
        out[f"DP{dp}-EP{ep}"] = {
            "tpot_ms": timeline(ops).tpot_ms,
            "tpot_prefetch_ms": timeline(ops, plan_prefetch(ops)).tpot_ms,
        }
    return out
