"""labkit.deploy: the skill-changeable tiny MoE equals TinyMoE, its op slots and caches behave,
and the proposers answer as documented (the OpenAI path is tested in tests/labs/test_agent_deploy.py
against a local stub server)."""

from __future__ import annotations

import pytest
import torch
from labkit import emu, mx
from labkit.deploy import (
    GRAPH_COMPILE_LAUNCHES,
    DeployModel,
    OpenAIProposer,
    ProposalError,
    RuleProposer,
    eager_experts,
    grouped_experts,
    parse_answer,
    propose_with_fallback,
)
from labkit.models import load_tiny_moe
from labkit.npu import npu_add_rms_norm, npu_rms_norm


@pytest.fixture(scope="module")
def loaded():
    return load_tiny_moe()


@pytest.fixture
def prompt(loaded):
    return loaded[1].encode("the probe orbits mars every four days .", bos=True)


def test_equals_tiny_moe(loaded, prompt):
    base, _ = loaded
    m = DeployModel(base)
    ids = torch.tensor([prompt])
    assert torch.allclose(m.teacher_logits(prompt), base(ids)[0], atol=1e-5)
    assert m.generate(prompt, 12) == base.generate(prompt, max_new_tokens=12)


def test_eager_ops_launch_more_than_fused(loaded, prompt):
    m = DeployModel(loaded[0])
    f = m.clone()
    f.ops.rms_norm = lambda x, g, eps: npu_rms_norm(x, g, epsilon=eps)[0]
    f.ops.add_rms_norm = lambda x, r, g, eps: (lambda y: (y[0], y[2]))(npu_add_rms_norm(x, r, g, epsilon=eps))
    assert f.ops.changed() == ["rms_norm", "add_rms_norm"] and m.ops.changed() == []
    runs = {}
    for name, model in (("eager", m), ("fused", f)):
        with emu.session("950PR", measurer=False) as s:
            toks = model.generate(prompt, 6)
        runs[name] = (toks, s.report().launches)
    assert runs["eager"][0] == runs["fused"][0]
    # per layer two norms at 5 + 1 launches become 1 each; 5 decode steps of 3 layers + the final norm
    assert runs["eager"][1] - runs["fused"][1] == 5 * (3 * 2 * 5 + 4 * 1)


def test_grouped_experts_equal_eager(loaded):
    m = DeployModel(loaded[0])
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, m.cfg.d_model, generator=g)
    w = torch.rand(5, m.cfg.top_k, generator=g)
    idx = torch.randint(0, m.cfg.n_routed_experts, (5, m.cfg.top_k), generator=g)
    a = eager_experts(m, "layers.0", x, w, idx)
    b = grouped_experts(m, "layers.0", x, w, idx)
    assert torch.allclose(a, b, atol=1e-6)
    with emu.session("950PR", measurer=False) as s:
        grouped_experts(m, "layers.0", x, w, idx)
    assert s.report().launches == 6  # init_routing, gate_up GMM, eager SwiGLU (2), down GMM, finalize


def test_clone_is_independent_and_weights_count_mx_bytes(loaded):
    m = DeployModel(loaded[0])
    c = m.clone()
    before = m.weight_bytes("attn")
    for n in c.names("attn"):
        c.weights[n] = mx.quantize_mx(c.weights[n], "mxfp8_e4m3")
    c.graph = True
    assert m.weight_bytes("attn") == before and not m.graph
    assert c.weight_bytes("attn") == before * 33 // 128  # 33 bytes per 32 fp32 elements
    assert c.state()["formats"]["attn"] == ["mxfp8_e4m3"] and m.state()["formats"]["attn"] == []


def test_graph_compile_once_per_shape(loaded, prompt):
    m = DeployModel(loaded[0])
    m.graph = True
    with emu.session("950PR", measurer=False) as s:
        m.generate(prompt, 4)
    first = s.report()
    with emu.session("950PR", measurer=False) as s:
        m.generate(prompt, 4)
    warm = s.report()
    assert first.ops["graph_compile"].launches == GRAPH_COMPILE_LAUNCHES
    assert "graph_compile" not in warm.ops
    assert first.elapsed_ms - warm.elapsed_ms == pytest.approx(GRAPH_COMPILE_LAUNCHES * 20e-3, rel=1e-6)
    assert "graph_compile" in _run_ops(m.clone(), prompt)  # a clone starts cold


def _run_ops(model, prompt):
    with emu.session("950PR", measurer=False) as s:
        model.generate(prompt, 3)
    return s.report().ops


def test_prefill_is_not_charged(loaded, prompt):
    m = DeployModel(loaded[0])
    with emu.session("950PR", measurer=False) as s:
        m.generate(prompt, 1)
    assert s.report().launches == 0


def test_rule_proposer_follows_the_profile():
    cands = {
        "fused_ops": "fused kernels",
        "graph_mode": "captured graph",
        "quant_mx": "MXFP8 weights",
        "mtp": "MTP drafts",
    }
    rp = RuleProposer()
    assert (
        rp.propose({"ms_per_token": 1.0, "launch_ms": 0.9, "memory_ms": 0.1}, cands, []).skill == "fused_ops"
    )
    del cands["fused_ops"]
    assert (
        rp.propose({"ms_per_token": 1.0, "launch_ms": 0.9, "memory_ms": 0.1}, cands, []).skill == "graph_mode"
    )
    del cands["graph_mode"]
    p = rp.propose({"ms_per_token": 1.0, "launch_ms": 0.2, "memory_ms": 0.7}, cands, [])
    assert p.skill == "quant_mx" and "memory-bound" in p.reason and p.source == "rules"
    with pytest.raises(ProposalError):
        rp.propose({}, {}, [])


def test_parse_answer():
    cands = {"fused_ops": "", "graph_mode": ""}
    assert parse_answer('```json\n{"skill": "graph_mode", "reason": "launch-bound"}\n```', cands) == (
        "graph_mode",
        "launch-bound",
    )
    assert parse_answer("I would try fused_ops first.", cands)[0] == "fused_ops"
    with pytest.raises(ProposalError):
        parse_answer('{"skill": "superkernel"}', cands)


def test_unreachable_endpoint_falls_back_to_rules():
    p = propose_with_fallback(
        OpenAIProposer("http://127.0.0.1:9", "stub", timeout=2),
        {"ms_per_token": 1.0, "launch_ms": 0.9},
        {"fused_ops": "fused kernels"},
        [],
    )
    assert p.skill == "fused_ops" and p.source.startswith("rules (llm failed:")
    assert OpenAIProposer.from_env({}) is None
    assert OpenAIProposer.from_env({"AGENT_LLM_BASE_URL": "http://x/v1", "AGENT_LLM_MODEL": "m"}).model == "m"


def test_what_the_model_hands_back_can_be_changed_in_place(loaded, prompt):
    """The forward passes run in inference mode; their results and the KV cache are ordinary
    tensors all the same (a decode loop may write into them)."""
    m = DeployModel(loaded[0])
    logits, hidden, cache = m.prefill(prompt, max_new=4)
    logits[0] += 1.0
    hidden.mul_(2.0)
    cache.k[0].zero_()
    step_logits, step_hidden = m.step([int(logits[-1].argmax())], cache)
    step_logits.div_(2.0)
    step_hidden[0, 0] = 0.0
    m.teacher_logits(prompt).neg_()
    assert not any(t.is_inference() for t in (logits, hidden, cache.k[0], step_logits, step_hidden))


def test_dequantised_weight_cache_equals_each_weights_own(loaded, prompt):
    """The MX weights are dequantised for the cache in stacks of alike weights: each entry is bit
    for bit that weight's own dequantisation."""
    m = DeployModel(loaded[0])
    for n in m.names("expert"):
        m.weights[n] = mx.quantize_mx(m.weights[n], "mxfp4")
    for n in m.names("attn"):
        m.weights[n] = mx.quantize_mx(m.weights[n], "mxfp8_e4m3")
    m.act_fmt["expert"] = "mxfp8_e4m3"
    m.generate(prompt, 2)
    for n in m.names("expert") + m.names("attn"):
        w = m.weights[n]
        assert m._deq[id(w)][0] is w
        assert torch.equal(m._deq[id(w)][1], mx.dequantize(w, torch.float32).t().contiguous())
