"""How a skill is verified against the model before it: tokens unchanged (greedy), or the
logits within a stated tolerance."""

from __future__ import annotations

import math


def verify(ref, cand, spec, prompts, n):
    """Compare ``cand`` with ``ref`` as ``spec`` (a skill's ``SKILL["verify"]``) says:

    - ``{"kind": "tokens"}``: the greedy tokens of every prompt are the same;
    - ``{"kind": "logits", "tol": t}``: on each prompt followed by ``ref``'s own continuation
      (teacher forcing, so one early difference does not snowball), the logits' relative RMS
      error ``||cand - ref|| / ||ref||`` is at most ``t``.

    Returns ``{"kind", "metric", "value", "tol", "passed"}``."""
    kind = spec["kind"]
    if kind == "tokens":
        changed = 0
        for p in prompts:
            a, b = ref.generate(p, n), cand.generate(p, n)
            changed += sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))
        return {"kind": kind, "metric": "tokens_changed", "value": changed, "tol": 0, "passed": changed == 0}
    if kind == "logits":
        tol = float(spec["tol"])
        num = den = 0.0
        for p in prompts:
            seq = list(p) + ref.generate(p, n)
            a, b = ref.teacher_logits(seq), cand.teacher_logits(seq)
            num += float((b - a).pow(2).sum())
            den += float(a.pow(2).sum())
        value = math.sqrt(num / den)
        return {"kind": kind, "metric": "logits_rel_rms", "value": value, "tol": tol, "passed": value <= tol}
    raise ValueError(f"unknown verification kind {kind!r}")
