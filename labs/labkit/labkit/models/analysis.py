"""Measuring how the tiny MoE routes: expert popularity per topic and hot-set coverage.

The offload lab depends on routing being skewed and prompt-dependent: a hot set picked from
one prompt's routing should cover that prompt's expert activations much better than a
uniform pick, and better than the hot set of a prompt on another topic.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from . import corpus
from .tiny_moe import TinyMoE
from .tokenizer import WordTokenizer


@torch.no_grad()
def routing_counts(model: TinyMoE, sequences: list[list[int]]) -> torch.Tensor:
    """Expert activation counts ``[n_layers, n_experts]`` over all tokens of ``sequences``."""
    cfg = model.cfg
    counts = torch.zeros(cfg.n_layers, cfg.n_routed_experts, dtype=torch.long)
    trace: list[tuple[int, torch.Tensor]] = []
    before = model.trace_routing
    model.trace_routing = trace
    try:
        for seq in sequences:
            model(torch.tensor([seq]))
    finally:
        model.trace_routing = before
    for layer, idx in trace:
        counts[layer] += torch.bincount(idx.flatten(), minlength=cfg.n_routed_experts)
    return counts


def hot_sets(counts: torch.Tensor, k: int) -> torch.Tensor:
    """Per layer, the ``k`` most activated experts ``[n_layers, k]`` (ties: lower id first)."""
    order = sorted(range(counts.shape[1]), key=lambda e: e)  # stable tie-break by expert id
    idx = torch.tensor(order)
    ranked = torch.stack(
        [idx[torch.argsort(-counts[layer][idx], stable=True)] for layer in range(counts.shape[0])]
    )
    return ranked[:, :k]


def coverage(counts: torch.Tensor, hot: torch.Tensor) -> float:
    """Share of all activations in ``counts`` that fall on the per-layer ``hot`` experts."""
    covered = sum(int(counts[layer, hot[layer]].sum()) for layer in range(counts.shape[0]))
    total = int(counts.sum())
    return covered / total if total else 0.0


def topic_routing_report(
    model: TinyMoE, tok: WordTokenizer, *, paragraphs: int = 40, hot: int = 8, seed: int = 1
) -> dict[str, Any]:
    """Route held-out paragraphs of every topic and compare their hot sets.

    Returns ``own`` (coverage of a topic's activations by its own top-``hot`` set, per topic),
    ``cross`` (coverage of topic A by topic B's set, A != B), their means, the uniform
    baseline ``hot / n_experts`` and the per-topic counts.
    """
    rng = random.Random(seed)
    names = corpus.topics()
    counts = {
        t: routing_counts(
            model, [tok.encode(corpus.make_paragraph(t, rng).text, bos=True) for _ in range(paragraphs)]
        )
        for t in names
    }
    sets = {t: hot_sets(c, hot) for t, c in counts.items()}
    own = {t: coverage(counts[t], sets[t]) for t in names}
    cross = {f"{a}<-{b}": coverage(counts[a], sets[b]) for a in names for b in names if a != b}
    return {
        "hot": hot,
        "n_experts": model.cfg.n_routed_experts,
        "uniform": hot / model.cfg.n_routed_experts,
        "own": own,
        "cross": cross,
        "own_mean": sum(own.values()) / len(own),
        "cross_mean": sum(cross.values()) / len(cross),
        "counts": {t: c.tolist() for t, c in counts.items()},
    }
