"""Step 5: prefetch the next weights into L2 while ops that leave the HBM idle run."""

from labkit.longcat import CLUSTER_A2, Prefetch, decode_ops, op_window, timeline  # noqa: F401


def plan_prefetch(ops, cluster=CLUSTER_A2):
    """A list of Prefetch(host, target, bytes) for the decode step `ops` (labkit.longcat.Op)."""
    raise NotImplementedError("TODO step 5")


def report(plans):
    """{"DP<dp>-EP<ep>": {"tpot_ms": ..., "tpot_prefetch_ms": ...}} for each
    (cards, dp, ep, batch, context) plan."""
    raise NotImplementedError("TODO step 5")
