"""Steps 2-4: parallel block draft, sequential correction, confidence filtering."""

from __future__ import annotations

import torch


@torch.no_grad()
def parallel_draft(drafter, context_hidden: torch.Tensor, last_token: int) -> torch.Tensor:
    """Step 2: one pass over ``[last_token, MASK, ...]`` -> logits ``[block_size, V]``."""
    block = torch.tensor([[last_token] + [drafter.mask_id] * (drafter.block_size - 1)])
    return drafter(context_hidden.reshape(1, -1), block)[0]


@torch.no_grad()
def correct(drafter, logits: torch.Tensor, last_token: int) -> tuple[list[int], torch.Tensor]:
    """Step 3: add the Markov head, conditioned on the token chosen one position earlier."""
    prev, tokens, rows = last_token, [], []
    for j in range(logits.shape[0]):
        row = logits[j] + drafter.markov_logits(torch.tensor([prev]))[0]
        prev = int(row.argmax())
        tokens.append(prev)
        rows.append(row)
    return tokens, torch.stack(rows) if rows else logits[:0]


def draft_confidence(logits: torch.Tensor) -> torch.Tensor:
    """Step 4: the parallel pass's own probability of its best token, per position."""
    return torch.softmax(logits.float(), dim=-1).amax(dim=-1)


def confident_length(conf: torch.Tensor, tau: float) -> int:
    """Step 4: the longest prefix whose running product of confidences stays >= ``tau``; at least one."""
    n, run = 0, 1.0
    while n < len(conf):
        run *= float(conf[n])
        if run < tau:
            break
        n += 1
    return max(1, n)


@torch.no_grad()
def draft_block(drafter, context_hidden, last_token: int, tau: float):
    """Step 4: (tokens [L], q [L, V] the corrected draft distribution, conf [block_size])."""
    logits = parallel_draft(drafter, context_hidden, last_token)
    conf = draft_confidence(logits)
    n = confident_length(conf, tau)
    tokens, corrected = correct(drafter, logits[:n], last_token)
    return tokens, torch.softmax(corrected.float(), dim=-1), conf
