"""Generate the toy checkpoint (seeded): ``python -m dsv4flash.make_weights``.

The weights are built, not trained, so that expert popularity behaves like a real MoE's:

- eight topic directions live in a 16-dimensional subspace; a topic word's embedding points
  along its topic, common words are noise;
- attention is close to uniform and its value/output projections keep that subspace, so every
  position carries the topic of the text before it;
- each layer gives every topic its own 32 experts (a random permutation per layer, so "the
  first 32" is no better than any other 32) with Zipf-like strengths: a few experts of the
  prompt's topic take most of the traffic, the rest is spread thinly (skewed, prompt-dependent);
- routed experts are drawn then quantised to native MXFP4; attention and shared experts are
  stored as W8A8 int8, router and embeddings as bf16.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from . import corpus, mxfp4
from .config import HERE, ModelConfig

SEED = 20260808
N_TOPICS = len(corpus.TOPICS)
SUBSPACE = 16
# strengths of the construction (chosen so static "first 32" covers ~1/8 of the routed slots and a
# prompt's own top-32 covers ~3x that, as in the talk)
EMBED_TOPIC, EMBED_NOISE = 1.5, 2.0
ATTN_KEEP = 0.15
ROUTER_TOPIC, ROUTER_NOISE, ZIPF = 3.2, 0.55, 0.9
EXPERT_STD = 0.35


def _w8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (w.abs().amax(-1) / 127).clamp_min(1e-8)
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale.float()


def build(cfg: ModelConfig, seed: int = SEED) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    d, hd, e_n, inter = cfg.d_model, cfg.head_dim, cfg.n_routed_experts, cfg.moe_inter
    basis, _ = torch.linalg.qr(randn(d, d))
    sub = basis[:, :SUBSPACE]  # [d, 16]
    topics = sub[:, :N_TOPICS].T  # [8, d] orthonormal topic directions

    vocab = corpus.vocabulary(cfg.vocab_size)
    topic_of = corpus.topic_of_word(vocab)
    embed = EMBED_NOISE * randn(cfg.vocab_size, d) / d**0.5 * 2
    for w, t in enumerate(topic_of):
        if t >= 0:
            embed[w] += EMBED_TOPIC * topics[t]
    t: dict[str, torch.Tensor] = {
        "embed.weight": embed.bfloat16(),
        "lm_head.weight": (embed + 0.3 * randn(cfg.vocab_size, d) / d**0.5).bfloat16(),
        "norm.weight": torch.ones(d),
    }

    def put_w8(name: str, w: torch.Tensor) -> None:
        q, s = _w8(w)
        t[name + ".weight"], t[name + ".scale"] = q, s

    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        t[p + "attn_norm.weight"] = torch.ones(d)
        t[p + "ffn_norm.weight"] = torch.ones(d)
        put_w8(p + "attn.wq", 0.3 * randn(cfg.n_heads * hd, d) / d**0.5)
        put_w8(p + "attn.wk", 0.3 * randn(cfg.n_kv_heads * hd, d) / d**0.5)
        wv = sub.T.clone()[: cfg.n_kv_heads * hd] + 0.05 * randn(cfg.n_kv_heads * hd, d)
        put_w8(p + "attn.wv", wv)
        wo = torch.cat([sub for _ in range(cfg.n_heads)], dim=1) * (ATTN_KEEP / cfg.n_heads)
        put_w8(p + "attn.wo", wo / (d**0.5 / 4) + 0.02 * randn(d, cfg.n_heads * hd))
        # router: expert perm[j] belongs to topic j % 8 with Zipf strength by rank j // 8
        perm = torch.randperm(e_n, generator=g)
        router = ROUTER_NOISE * randn(e_n, d)
        for j in range(e_n):
            rank = j // N_TOPICS
            strength = ROUTER_TOPIC * (rank + 1) ** -ZIPF
            router[perm[j]] += strength * topics[j % N_TOPICS] * d**0.5 / 8
        t[p + "ffn.gate.weight"] = router.bfloat16()
        put_w8(p + "ffn.shared_experts.gate_up", EXPERT_STD * randn(2 * inter, d) / d**0.5)
        put_w8(p + "ffn.shared_experts.down", EXPERT_STD * randn(d, inter) / inter**0.5)
        for proj, rows, k in (("gate_up", 2 * inter, d), ("down", d, inter)):
            codes, scales = mxfp4.quantize(EXPERT_STD * randn(e_n, rows, k) / k**0.5)
            t[p + f"ffn.experts.{proj}.blocks"] = mxfp4.pack_consecutive(codes)
            t[p + f"ffn.experts.{proj}.scales"] = scales
    return {k: v.contiguous() for k, v in t.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "weights")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = ModelConfig()
    args.out.mkdir(parents=True, exist_ok=True)
    tensors = build(cfg, args.seed)
    save_file(tensors, str(args.out / "dsv4_flash_toy.safetensors"), metadata={"seed": str(args.seed)})
    (args.out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    print(f"wrote {len(tensors)} tensors, {total / 1e6:.2f} MB, to {args.out}")


if __name__ == "__main__":
    main()
