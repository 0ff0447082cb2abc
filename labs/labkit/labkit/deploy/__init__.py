"""labkit.deploy: a tiny MoE whose ops, weights, graph mode and decode loop a *skill* can change
(:mod:`.model`), and the proposers of an optimise-and-verify workflow (:mod:`.propose`).

Used by the agent-deploy lab (talk 2: Hy3 deployment optimised by an agent workflow).
"""

from .model import (
    GRAPH_COMPILE_LAUNCHES,
    GROUPS,
    DeployModel,
    Ops,
    eager_add_rms_norm,
    eager_experts,
    eager_gating,
    eager_rms_norm,
    eager_swiglu,
    greedy,
    group_of,
    grouped_experts,
)
from .propose import (
    OpenAIProposer,
    Proposal,
    ProposalError,
    Proposer,
    RuleProposer,
    parse_answer,
    propose_with_fallback,
    source_text,
)

__all__ = [
    "GRAPH_COMPILE_LAUNCHES",
    "GROUPS",
    "DeployModel",
    "OpenAIProposer",
    "Ops",
    "Proposal",
    "ProposalError",
    "Proposer",
    "RuleProposer",
    "eager_add_rms_norm",
    "eager_experts",
    "grouped_experts",
    "eager_gating",
    "eager_rms_norm",
    "eager_swiglu",
    "greedy",
    "group_of",
    "parse_answer",
    "propose_with_fallback",
    "source_text",
]
