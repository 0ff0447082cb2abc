"""Who proposes the next skill: rules read from the profile, or an OpenAI-compatible endpoint.

A proposer only *proposes*: whatever it names still goes through the runner's verification and
measurement, so a language model can suggest a bad skill but never keep one. Both proposers
answer ``propose(profile, candidates, history) -> Proposal``:

- ``profile``: the runner's profile of the current model (``ms_per_token``, ``launch_ms``,
  ``compute_ms``, ``memory_ms``, ``weight_bytes``, ...);
- ``candidates``: ``{skill name: one-line description}`` of the skills not tried yet;
- ``history``: the decisions so far (plain dicts), for the model's context.

:class:`RuleProposer` needs nothing: launch-bound -> a skill that removes launches (fusion first,
then graph mode), memory-bound -> quantisation, then speculation. :class:`OpenAIProposer` POSTs
``{base_url}/chat/completions`` (the OpenAI chat protocol that vLLM, SGLang, Ollama and others
speak) with the standard library only; an answer that names no candidate raises
:class:`ProposalError`, and :func:`propose_with_fallback` then asks the rules and says so.
Configured by ``AGENT_LLM_BASE_URL``, ``AGENT_LLM_MODEL`` and (optional) ``AGENT_LLM_API_KEY``.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

#: keywords -> what a skill addresses, matched against skill names and descriptions
_LAUNCH = ("fus", "graph", "launch")
_MEMORY = ("quant", "mx", "fp8", "fp4")
_SPEC = ("mtp", "specul", "draft")


@dataclass(frozen=True)
class Proposal:
    skill: str
    reason: str  # English (a language model's reason as it answered)
    source: str  # "rules" | "llm:<model>" | "rules (llm failed: ...)"
    reason_zh: str = ""  # the rules' reason in Chinese ("" for a model's answer: shown as it is)

    @property
    def reasons(self) -> dict[str, str]:
        """``{"en": ..., "zh": ...}``: what a decision log records, so each language's log reads
        in its own language."""
        return {"en": self.reason, "zh": self.reason_zh or self.reason}


_KIND_ZH = {"launch": "减少下发的", "memory": "减少访存的", "spec": "投机解码", "other": "其他"}


def source_text(source: str, lang: str = "en") -> str:
    """A proposal's ``source`` for a log in ``lang``: ``rules`` is 规则 in Chinese, a failed
    model call says so in Chinese around the (English) error; ``llm:<model>`` names the model."""
    if lang != "zh":
        return source
    if source == "rules":
        return "规则"
    if source.startswith("rules (llm failed: "):
        return f"规则（大模型调用失败：{source.removeprefix('rules (llm failed: ').removesuffix(')')}）"
    if source.startswith("llm:"):
        return f"大模型 {source.removeprefix('llm:')}"
    return source


class ProposalError(RuntimeError):
    """The endpoint could not be reached or its answer named no candidate skill."""


class Proposer(Protocol):
    def propose(
        self, profile: dict[str, Any], candidates: dict[str, str], history: list[dict[str, Any]]
    ) -> Proposal: ...


def _kind(name: str, text: str) -> str:
    s = f"{name} {text}".lower()
    if any(k in s for k in _SPEC):
        return "spec"
    if any(k in s for k in _MEMORY):
        return "memory"
    if any(k in s for k in _LAUNCH):
        return "launch"
    return "other"


class RuleProposer:
    """Deterministic proposals from where the time goes (see the module docstring)."""

    def propose(
        self, profile: dict[str, Any], candidates: dict[str, str], history: list[dict[str, Any]]
    ) -> Proposal:
        if not candidates:
            raise ProposalError("no candidate skills left")
        step = float(profile.get("ms_per_token") or profile.get("step_ms") or 0.0) or 1e-12
        shares = {
            "launch": float(profile.get("launch_ms", 0.0)) / step,
            "memory": float(profile.get("memory_ms", 0.0)) / step,
        }
        kinds = {name: _kind(name, text) for name, text in candidates.items()}
        # fusion before graph mode (the talk's order: fused ops, then ge_graph)
        order = sorted(candidates, key=lambda n: (0 if "fus" in n.lower() else 1, n))
        if shares["launch"] >= 0.5:
            for name in order:
                if kinds[name] == "launch":
                    return Proposal(
                        name,
                        f"launch-bound: launches are {shares['launch']:.0%} of the step",
                        "rules",
                        f"下发受限：算子下发占这一步的 {shares['launch']:.0%}",
                    )
        if shares["memory"] >= 0.3:
            for name in order:
                if kinds[name] == "memory":
                    return Proposal(
                        name,
                        f"memory-bound: weight traffic is {shares['memory']:.0%} of the step",
                        "rules",
                        f"访存受限：权重搬运占这一步的 {shares['memory']:.0%}",
                    )
        for want in ("launch", "memory", "spec", "other"):
            for name in order:
                if kinds[name] == want:
                    return Proposal(
                        name,
                        f"next {want} skill (launch {shares['launch']:.0%}, memory {shares['memory']:.0%})",
                        "rules",
                        f"下一个{_KIND_ZH[want]}技能（下发占 {shares['launch']:.0%}，访存占 {shares['memory']:.0%}）",
                    )
        raise ProposalError("no candidate skills left")  # pragma: no cover (the loop returns)


class OpenAIProposer:
    """Ask an OpenAI-compatible chat endpoint which skill to try next."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OpenAIProposer | None:
        env = dict(os.environ) if env is None else env
        url, model = env.get("AGENT_LLM_BASE_URL"), env.get("AGENT_LLM_MODEL")
        if not url or not model:
            return None
        return cls(url, model, env.get("AGENT_LLM_API_KEY") or None)

    def request_body(
        self, profile: dict[str, Any], candidates: dict[str, str], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        system = (
            "You optimise the decode step of a MoE model on an Ascend NPU. Pick the ONE skill to try "
            "next from the candidates. Every skill is verified and measured before it is kept. "
            'Answer with JSON only: {"skill": "<candidate name>", "reason": "<one sentence>"}.'
        )
        user = json.dumps({"profile": profile, "candidates": candidates, "history": history}, sort_keys=True)
        return {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
        }

    def propose(
        self, profile: dict[str, Any], candidates: dict[str, str], history: list[dict[str, Any]]
    ) -> Proposal:
        body = json.dumps(self.request_body(profile, candidates, history)).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read().decode())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ProposalError(f"endpoint {self.base_url} failed: {e}") from e
        try:
            content = str(data["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError) as e:
            raise ProposalError("the answer has no choices[0].message.content") from e
        skill, reason = parse_answer(content, candidates)
        return Proposal(skill, reason, f"llm:{self.model}")


def parse_answer(content: str, candidates: dict[str, str]) -> tuple[str, str]:
    """(skill, reason) from a model's answer: JSON ``{"skill", "reason"}`` (possibly inside a code
    fence), else the first candidate name the text mentions; :class:`ProposalError` otherwise."""
    m = re.search(r"\{.*\}", content, re.S)
    if m:
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            obj = None
        if isinstance(obj, dict) and str(obj.get("skill")) in candidates:
            return str(obj["skill"]), str(obj.get("reason", ""))[:500]
    hits = sorted((content.find(n), n) for n in candidates if n in content)
    if hits:
        return hits[0][1], content.strip()[:500]
    raise ProposalError(f"the answer names no candidate skill ({', '.join(candidates)}): {content[:200]!r}")


def propose_with_fallback(
    proposer: Proposer | None,
    profile: dict[str, Any],
    candidates: dict[str, str],
    history: list[dict[str, Any]],
) -> Proposal:
    """The proposer's answer, or the rules' when there is no proposer or it fails (the reason
    says why, so the decision log shows it)."""
    rules = RuleProposer()
    if proposer is None or isinstance(proposer, RuleProposer):
        return rules.propose(profile, candidates, history)
    try:
        return proposer.propose(profile, candidates, history)
    except ProposalError as e:
        p = rules.propose(profile, candidates, history)
        return Proposal(p.skill, p.reason, f"rules (llm failed: {e})"[:300], p.reason_zh)
