"""Step 5: batch verification, greedy and sampling (the lossless rules)."""

from __future__ import annotations

import torch


def verify_greedy(target_logits: torch.Tensor, draft: list[int]) -> tuple[int, list[int]]:
    """``target_logits [L+1, V]`` from one pass over ``[last, *draft]`` -> (accepted, emitted)."""
    best = target_logits.argmax(dim=-1).tolist()
    a = 0
    while a < len(draft) and draft[a] == best[a]:
        a += 1
    return a, list(draft[:a]) + [best[a]]


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, p - q)); the target itself when nothing is left."""
    r = torch.clamp(p - q, min=0)
    s = r.sum()
    return r / s if s > 0 else p


def verify_sampling(
    p: torch.Tensor, q: torch.Tensor, draft: list[int], generator: torch.Generator
) -> tuple[int, list[int]]:
    """``p [L+1, V]`` target, ``q [L, V]`` draft probabilities -> (accepted, emitted)."""
    for i, x in enumerate(draft):
        u = float(torch.rand((), generator=generator))
        if u < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = residual(p[i], q[i])
        return i, list(draft[:i]) + [int(torch.multinomial(r, 1, generator=generator))]
    bonus = int(torch.multinomial(p[len(draft)], 1, generator=generator))
    return len(draft), list(draft) + [bonus]
