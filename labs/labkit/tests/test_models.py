"""labkit.models: the tiny MoE (shapes, KV cache, determinism, MTP, accounting) and its corpus."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from labkit import emu
from labkit.models import KVCache, TinyMoE, TinyMoEConfig, WordTokenizer, corpus, load_tiny_moe, tiny_moe_meta
from safetensors.torch import load_file

SMALL = TinyMoEConfig(
    vocab_size=50,
    d_model=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    n_routed_experts=8,
    top_k=2,
    expert_hidden=16,
    shared_hidden=16,
    max_seq_len=64,
)


@pytest.fixture(scope="module")
def small() -> TinyMoE:
    torch.manual_seed(0)
    return TinyMoE(SMALL).eval()


def test_shapes(small: TinyMoE):
    ids = torch.randint(0, 50, (3, 11))
    logits = small(ids)
    assert logits.shape == (3, 11, 50)
    hidden = small.hidden(ids)
    assert hidden.shape == (3, 11, 32)
    assert small.mtp_logits(hidden[:, :-1], ids[:, 1:]).shape == (3, 10, 50)
    cache = small.new_cache(batch=3)
    assert isinstance(cache, KVCache) and len(cache.k) == SMALL.n_layers + 1
    small(ids, cache)
    assert cache.length == 11
    assert cache.k[0].shape == (3, SMALL.n_kv_heads, SMALL.max_seq_len, SMALL.head_dim)


@torch.no_grad()
def test_kv_cache_decode_equals_full_recompute(small: TinyMoE):
    ids = torch.randint(4, 50, (2, 20))
    full = small(ids)
    cache = small.new_cache(batch=2)
    parts = [small(ids[:, :7], cache)]
    for t in range(7, 20):
        parts.append(small(ids[:, t : t + 1], cache))
    stepped = torch.cat(parts, dim=1)
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_generate_equals_argmax_of_full_recompute(small: TinyMoE):
    prompt = [1, 5, 9, 13]
    out = small.generate(prompt, max_new_tokens=12)
    seq = list(prompt)
    for _ in range(12):
        seq.append(int(small(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[len(prompt) :]


def test_seeded_init_is_deterministic_and_seed_dependent():
    a, b = TinyMoE(SMALL), TinyMoE(SMALL)
    c = TinyMoE(TinyMoEConfig(**{**SMALL.to_dict(), "seed": 1}))
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.embed, c.embed)


def test_generation_is_deterministic(small: TinyMoE):
    assert small.generate([1, 2, 3], 16) == small.generate([1, 2, 3], 16)


def test_routing_trace_records_top_k_per_layer(small: TinyMoE):
    trace: list[tuple[int, torch.Tensor]] = []
    small.trace_routing = trace
    try:
        small(torch.randint(0, 50, (1, 5)))
    finally:
        small.trace_routing = None
    assert [layer for layer, _ in trace] == [0, 1]
    assert all(idx.shape == (5, SMALL.top_k) for _, idx in trace)
    assert all(len(set(row.tolist())) == SMALL.top_k for _, idx in trace for row in idx)


def test_moe_routed_weights_sum_to_one(small: TinyMoE):
    w, idx, logits = small.moe_layers[0].route(torch.randn(6, 32))
    torch.testing.assert_close(w.sum(-1), torch.ones(6))
    assert torch.equal(idx, torch.softmax(logits, -1).topk(SMALL.top_k).indices)


def test_ops_are_charged_to_the_emu_session(small: TinyMoE):
    def decode_report() -> emu.EmuReport:
        cache = small.new_cache()
        small(torch.tensor([[1, 2, 3, 4]]), cache)
        with emu.session("910B", measurer=False) as s:
            small(torch.tensor([[5]]), cache)
            return s.report()

    r = decode_report()
    for op in ("embedding", "attn_q", "attention", "router", "expert_gate_up", "expert_down", "lm_head"):
        assert r.ops[op].count >= 1, op
    assert r.ops["expert_gate_up"].count == SMALL.n_layers * SMALL.top_k
    assert r.ops["attn_q"].count == SMALL.n_layers
    # one token through expert gate_up: x [1, 32] in, y [1, 32] out, W [2*16, 32], all fp32
    calls = SMALL.n_layers * SMALL.top_k
    assert r.ops["expert_gate_up"].bytes == calls * ((32 + 32) * 4 + 32 * 32 * 4)
    assert r.ops["expert_gate_up"].flops == calls * 2 * 32 * 32
    assert r.ops["expert_down"].bytes == calls * ((16 + 32) * 4 + 32 * 16 * 4)
    assert r.elapsed_ms > 0 and r.launches >= 20
    assert decode_report().to_json() == r.to_json()


def test_without_a_session_nothing_is_accounted(small: TinyMoE):
    assert emu.current() is None
    small(torch.tensor([[1, 2]]))


def test_tokenizer_round_trip():
    tok = WordTokenizer(corpus.all_words())
    text = "the chef fries the soup in a pan ."
    ids = tok.encode(text, bos=True, eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.decode(ids) == text
    assert tok.encode("The Chef xyzzy") == [tok.id("the"), tok.id("chef"), tok.unk_id]
    assert WordTokenizer.from_list(tok.to_list()).vocab == tok.vocab


def test_corpus_is_deterministic_and_grammatical():
    a, b = corpus.make_corpus(40, seed=3), corpus.make_corpus(40, seed=3)
    assert a == b and a != corpus.make_corpus(40, seed=4)
    assert {p.topic for p in a} == set(corpus.topics())
    for p in a:
        n, ok = corpus.grammatical_sentences(p.text, p.topic)
        assert n >= 3 and ok == n, p.text
    # the grammar check rejects scrambled text and other topics
    assert corpus.grammatical_sentences("the chef orbits mars every two days .")[1] == 0
    assert corpus.grammatical_sentences("the chef fries the soup in a pan .", "space")[1] == 0
    rng = random.Random(0)
    tok = WordTokenizer(corpus.all_words())
    assert tok.unk_id not in tok.encode(corpus.make_paragraph("code", rng).text)


def test_weight_groups_cover_every_parameter_once(small: TinyMoE):
    groups = small.weight_groups()
    assert sum(groups.values()) == sum(p.numel() * 4 for p in small.parameters())
    assert groups["layers.1.expert.7"] == (2 * 16 * 32 + 32 * 16) * 4
    assert len([t for t in groups if ".expert." in t]) == SMALL.n_layers * SMALL.n_routed_experts


def test_training_script_runs_and_is_deterministic(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "train_tiny_moe.py"
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run / "tiny"
        proc = subprocess.run(
            [
                sys.executable,
                str(script),
                "--steps",
                "3",
                "--paragraphs",
                "60",
                "--batch",
                "4",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(out)
    # compare tensors, not bytes: safetensors writes its metadata map in no fixed order
    a, b = (load_file(str(out.with_suffix(".safetensors"))) for out in outs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    model, tok = load_tiny_moe(outs[0])
    assert model.cfg.vocab_size == len(tok) and tiny_moe_meta(outs[0])["steps"] == 3
