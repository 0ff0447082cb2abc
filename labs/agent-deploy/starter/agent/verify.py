"""How a skill is verified against the model before it: tokens unchanged (greedy), or the
logits within a stated tolerance."""

from __future__ import annotations


def verify(ref, cand, spec, prompts, n):
    """Compare ``cand`` with ``ref`` as ``spec`` (a skill's ``SKILL["verify"]``) says:

    - ``{"kind": "tokens"}``: the greedy tokens of every prompt are the same
      (metric ``"tokens_changed"``: how many differ; tolerance 0);
    - ``{"kind": "logits", "tol": t}``: on each prompt followed by ``ref``'s own continuation
      (teacher forcing), the logits' relative RMS error ``||cand - ref|| / ||ref||`` over all
      prompts is at most ``t`` (metric ``"logits_rel_rms"``).

    Returns ``{"kind", "metric", "value", "tol", "passed"}``."""
    if spec["kind"] == "tokens":
        # TODO (step 2)
        raise NotImplementedError("TODO (step 2): the token check of verify() in agent/verify.py")
    if spec["kind"] == "logits":
        # TODO (step 3)
        raise NotImplementedError("TODO (step 3): the logits gate of verify() in agent/verify.py")
    raise ValueError(f"unknown verification kind {spec['kind']!r}")
