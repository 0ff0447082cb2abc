"""The shipped tiny-MoE weights behave like a language model of the synthetic corpus."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from labkit import emu
from labkit.models import WEIGHTS_DIR, corpus, load_tiny_moe, tiny_moe_meta
from labkit.models.analysis import topic_routing_report

#: Router logits differ between CPUs and thread counts by a few float32 ulps (3e-6 at most for
#: logits up to 7.8, between the AVX512, AVX2 and scalar kernels and 1 vs 2 threads): a routing
#: decision whose k-th and (k+1)-th logits are closer than this may go the other way elsewhere.
NEAR_TIE = 1e-4


@pytest.fixture(scope="module")
def shipped():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_tiny_moe()
    torch.set_num_threads(before)


@contextmanager
def count_near_ties(model, found: list[int]) -> Iterator[None]:
    """Add to ``found[0]`` every routing decision made inside the block that is a near tie."""

    def hook(moe, args, _out) -> None:  # type: ignore[no-untyped-def]
        x = args[0]
        logits = moe.route(x.reshape(-1, x.shape[-1]))[2]
        top = logits.topk(moe.top_k + 1, dim=-1).values
        found[0] += int((top[:, -2] - top[:, -1] < NEAR_TIE).sum())

    handles = [moe.register_forward_hook(hook) for moe in model.moe_layers]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def test_weights_are_small_safetensors_files():
    st = WEIGHTS_DIR / "tiny_moe.safetensors"
    assert st.exists(), "run labs/labkit/scripts/train_tiny_moe.py to make the shipped weights"
    assert 1e6 < st.stat().st_size < 8e6
    assert (WEIGHTS_DIR / "tiny_moe.json").exists()


def _prompts(seed: int = 7) -> list[tuple[str, str]]:
    """Per topic, one held-out sentence plus the first three words of the next one."""
    rng = random.Random(seed)
    out = []
    for topic in corpus.topics():
        first = corpus.make_sentence(topic, rng)
        nxt = corpus.make_sentence(topic, rng).split()
        out.append((topic, first + " " + " ".join(nxt[:3])))
    return out


def test_greedy_continuations_follow_the_corpus_grammar_and_stay_on_topic(shipped):
    model, tok = shipped
    total = good = 0
    for topic, prompt in _prompts():
        ids = tok.encode(prompt, bos=True)
        new = model.generate(ids, max_new_tokens=64)
        # the prompt's unfinished sentence and the continuation together
        unfinished = prompt.split(" . ")[-1]
        paragraph = new[: new.index(tok.eos_id)] if tok.eos_id in new else new
        n, ok = corpus.grammatical_sentences(unfinished + " " + tok.decode(paragraph), topic)
        print(f"{topic}: {prompt!r} -> {tok.decode(new, skip_special=False)!r}")
        assert n >= 2 and ok == n, (
            f"{topic}: the paragraph left the {topic} grammar: {tok.decode(paragraph)!r}"
        )
        # after the paragraph ends, a new one (any topic) starts: still grammatical
        n, ok = corpus.grammatical_sentences(unfinished + " " + tok.decode(new))
        assert n >= 4, f"{topic}: too few complete sentences in {tok.decode(new)!r}"
        total, good = total + n, good + ok
    assert good / total >= 0.9, f"only {good}/{total} generated sentences follow the grammar"


@torch.no_grad()
def test_next_token_and_mtp_predict_held_out_text(shipped):
    model, tok = shipped
    rng = random.Random(11)
    hits = mtp_hits = n = 0
    for _ in range(8):
        for topic in corpus.topics():
            ids = torch.tensor([tok.encode(corpus.make_paragraph(topic, rng).text, bos=True)])
            hidden = model.hidden(ids)
            pred = model.logits(hidden)[0, :-1].argmax(-1)
            hits += int((pred == ids[0, 1:]).sum())
            mtp = model.mtp_logits(hidden[:, :-2], ids[:, 1:-1])[0].argmax(-1)
            mtp_hits += int((mtp == ids[0, 2:]).sum())
            n += ids.shape[1] - 2
    acc, mtp_acc = hits / n, mtp_hits / n
    print(f"next-token accuracy {acc:.3f}, MTP (t+2) accuracy {mtp_acc:.3f}")
    # about half the tokens are free slot choices; the grammar words must be right
    assert acc > 0.6
    assert mtp_acc > 0.45


def test_routing_is_skewed_and_depends_on_the_topic(shipped):
    model, tok = shipped
    near = [0]
    with count_near_ties(model, near):
        r = topic_routing_report(model, tok)
    print(
        f"hot-{r['hot']} of {r['n_experts']}: own-topic coverage {r['own_mean']:.3f} "
        f"{ {k: round(v, 3) for k, v in r['own'].items()} }, cross-topic {r['cross_mean']:.3f}, "
        f"uniform {r['uniform']:.3f}"
    )
    # skewed: a topic's hot quarter of the experts covers far more than a quarter of its activations
    assert min(r["own"].values()) > r["uniform"] + 0.15
    # prompt-dependent: another topic's hot set covers much less (random weights fail this:
    # their router favours the same few experts whatever the topic, own ~0.65 vs cross ~0.62)
    assert r["own_mean"] > r["cross_mean"] + 0.15
    # the figures recorded at training time come back: exactly on a CPU that routes every token
    # as the training machine did; elsewhere only a near-tie decision can go the other way, and
    # each moves one activation between two experts, so a topic's own coverage by at most
    # 2 / (its activations) (one in or out of the hot set, one more if the hot set swaps a tie)
    meta = tiny_moe_meta()["routing"]
    fewest = min(sum(map(sum, c)) for c in r["counts"].values())
    per_topic = 2 * near[0] / fewest
    print(f"{near[0]} near-tie routing decisions: own coverage +-{per_topic:.1e}")
    for topic, own in meta["own"].items():
        assert r["own"][topic] == pytest.approx(own, abs=per_topic), topic
    assert r["own_mean"] == pytest.approx(meta["own_mean"], abs=per_topic / len(meta["own"]))


def test_decode_step_is_accounted_under_every_profile(shipped):
    model, tok = shipped
    ids = tok.encode("the chef fries the soup in a pan .", bos=True)
    times = {}
    for profile in emu.profile_names():
        cache = model.new_cache()
        with torch.no_grad():
            model(torch.tensor([ids]), cache)
            with emu.session(profile, measurer=False) as s:
                model(torch.tensor([[tok.id("the")]]), cache)
        times[profile] = s.elapsed_ms()
    assert all(t > 0 for t in times.values())
    assert times["950DT"] < times["950PR"]  # same FLOP rates, 2.5x the HBM bandwidth
