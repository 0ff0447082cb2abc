"""Run the optimise-and-verify workflow on the tiny MoE and write the decision log.

    python deploy.py                 # rule-based proposals from the profile
    python deploy.py --llm           # an OpenAI-compatible endpoint proposes (AGENT_LLM_BASE_URL,
                                     # AGENT_LLM_MODEL, optional AGENT_LLM_API_KEY); every proposal
                                     # is still verified and measured
Writes out/decision_log.{json,md,zh.md} and out/staged_table.{md,zh.md}.
"""

from __future__ import annotations

import argparse
import sys

import torch
from agent.log import render_table, write_log
from agent.measure import PROFILE
from agent.runner import load_skills, run_workflow
from labkit.deploy import DeployModel, OpenAIProposer
from labkit.models import load_tiny_moe

PROMPTS = [
    "the probe orbits mars every four days .",
    "stir the onions slowly and add a pinch of salt .",
    "the striker scored twice in the final minutes .",
    "the function returns a sorted list of keys .",
]


def main(argv=None):
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", action="store_true", help="let an OpenAI-compatible endpoint propose")
    ap.add_argument("--tokens", type=int, default=16, help="new tokens per prompt")
    ap.add_argument("--profile", default=PROFILE)
    ap.add_argument("--out", default="out")
    args = ap.parse_args(argv)
    proposer = None
    if args.llm:
        proposer = OpenAIProposer.from_env()
        if proposer is None:
            sys.exit("--llm needs AGENT_LLM_BASE_URL and AGENT_LLM_MODEL")
    base, tok = load_tiny_moe()
    prompts = [tok.encode(p, bos=True) for p in PROMPTS]
    _, history = run_workflow(
        DeployModel(base), load_skills("skills"), prompts, args.tokens, proposer, args.profile
    )
    out = write_log(history, args.out)
    print(render_table(history))
    print(f"decision log: {out}/decision_log.md ({out}/decision_log.zh.md)")


if __name__ == "__main__":
    main()
