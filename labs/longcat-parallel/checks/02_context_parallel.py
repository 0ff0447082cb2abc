"""Step 2: context-parallel attention on 4 gloo ranks equals single-process causal attention,
on shapes of this run (a shard of one token included) and inside the whole tiny model's prefill."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import torch  # noqa: E402
from labkit.check import main
from labkit.longcat import TinyLongcat, TinyLongcatConfig, causal_attention
from lc_harness import qkv_case
from lccheck import WORLD, Failure, choice, max_err, msg, ranks, rng, run_seed, sent_elements

TOL = 1e-4  # fp32 ring merge vs one softmax: ~1e-6 on these sizes
FIX = msg("Fix cp_attention() in cp_attention.py.", "修改 cp_attention.py 中的 cp_attention()。")


def _merge(
    q: torch.Tensor, blocks: list[tuple[torch.Tensor, torch.Tensor, str]], mean: bool = False
) -> torch.Tensor:
    """Attention of q over KV blocks, each 'full', 'tril' or 'skip' (a wrong solution's view)."""
    n = q.shape[-2]
    outs, scores, values = [], [], []
    for k, v, kind in blocks:
        if kind == "skip":
            continue
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if kind == "tril":
            s = s.masked_fill(torch.ones(n, k.shape[-2], dtype=torch.bool).triu(1), float("-inf"))
        scores.append(s)
        values.append(v)
        outs.append(torch.softmax(s, -1) @ v)
    if mean:
        return torch.stack(outs).mean(0)
    return torch.softmax(torch.cat(scores, -1), -1) @ torch.cat(values, -2)


def _kind(src: int, rank: int) -> str:
    return "full" if src < rank else "tril" if src == rank else "skip"


def variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    qs, ks, vs = (t.chunk(WORLD, 2) for t in (q, k, v))
    out: dict[str, list[torch.Tensor]] = {}
    for r in range(WORLD):
        blk = [(ks[j], vs[j]) for j in range(WORLD)]
        cases = {
            "unshifted": [(*blk[j], "tril") for j in range(WORLD)],
            "unshifted-past": [(*blk[j], "tril") for j in range(r + 1)],
            "wrong-step": [(*blk[(r - s) % WORLD], _kind((r + s) % WORLD, r)) for s in range(WORLD)],
            "no-mask": [(*blk[j], "full") for j in range(WORLD)],
            "local": [(*blk[r], "tril")],
        }
        for name, blocks in cases.items():
            out.setdefault(name, []).append(_merge(qs[r], blocks))
        out.setdefault("mean", []).append(
            _merge(qs[r], [(*blk[j], _kind(j, r)) for j in range(WORLD)], mean=True)
        )
    return out


NAMES = {
    "unshifted": msg(
        "the causal mask is not shifted per shard: every KV block is masked as if its keys were at the query shard's own positions (the local lower triangle), so earlier shards lose keys and later shards leak future keys",
        "因果掩码没有按分片平移：每个 KV 块都按本地下三角掩码处理，好像它的键和查询分片在同一位置；于是前面分片的键被错误遮掉，后面分片的未来键被泄露",
    ),
    "unshifted-past": msg(
        "the causal mask is not shifted per shard: KV blocks of earlier shards get the local lower-triangle mask, but every key of an earlier shard comes before every query of this shard and must be fully visible",
        "因果掩码没有按分片平移：前面分片的 KV 块用了本地下三角掩码，但前面分片的每个键都在本分片所有查询之前，应当完全可见",
    ),
    "wrong-step": msg(
        "the KV of the wrong ring step: at ring step s this rank holds the block of shard (rank - s) mod world (it came from the previous rank), but the mask was chosen for shard (rank + s) mod world",
        "用错了环的步次对应的 KV：第 s 步时本进程持有的是分片 (rank - s) mod world 的块（来自前一个进程），掩码却按分片 (rank + s) mod world 选择",
    ),
    "no-mask": msg("no causal mask at all: queries see future keys", "完全没有因果掩码：查询看到了未来的键"),
    "local": msg(
        "only the local shard's keys are used: the KV of the earlier shards never arrives (ring or all_gather the KV)",
        "只用了本地分片的键：前面分片的 KV 从未收到（需要环形传递或 all_gather KV）",
    ),
    "mean": msg(
        "the per-block outputs are averaged: blocks must be merged with their softmax statistics (running max and sum / log-sum-exp), not averaged",
        "各块的输出被直接平均了：需要用 softmax 统计量（运行最大值与和 / log-sum-exp）合并各块，而不是取平均",
    ),
}


def check() -> tuple[str, dict[str, float]]:
    g = rng("shapes")
    cases = [{"seed": run_seed("c0"), "b": 1, "h": 2, "s": WORLD, "d": 8}]  # one token per shard
    for i in range(2):
        n = int(torch.randint(2, 6, (1,), generator=g))
        cases.append(
            {
                "seed": run_seed(f"c{i + 1}"),
                "b": int(torch.randint(1, 3, (1,), generator=g)),
                "h": int(torch.randint(1, 4, (1,), generator=g)),
                "s": WORLD * n,
                "d": choice(f"d{i}", [4, 8, 16]),
            }
        )
    cfg_seed = run_seed("model") % 1000
    cfg = TinyLongcatConfig(seed=cfg_seed)
    s_model = WORLD * choice("len", [3, 4, 5])
    ids = torch.randint(0, cfg.vocab_size, (2, s_model), generator=g)
    values, res = ranks(
        "cp", cases, {"seed": cfg_seed, "ids": ids.tolist()}, file_hint="cp_attention.py: cp_attention()"
    )
    worst = 0.0
    for c_i, c in enumerate(cases):
        q, k, v = qkv_case(c["seed"], c["b"], c["h"], c["s"], c["d"])
        ref = causal_attention(q, k, v).chunk(WORLD, 2)
        got = [values[r]["cases"][c_i] for r in range(WORLD)]
        errs = [max_err(got[r], ref[r]) for r in range(WORLD)]
        worst = max(worst, *errs)
        if max(errs) <= TOL:
            continue
        dims = f"[B={c['b']}, H={c['h']}, S={c['s']}, D={c['d']}]"
        shape = msg(
            f"q, k, v of shape {dims} split over {WORLD} ranks ({c['s'] // WORLD} tokens each)",
            f"形状为 {dims}、切分到 {WORLD} 个进程（每个 {c['s'] // WORLD} 个 token）的 q、k、v",
        )
        for name, outs in variants(q, k, v).items():
            if all(max_err(got[r], outs[r]) <= TOL for r in range(WORLD)):
                raise Failure(msg(f"For {shape}: {NAMES[name]}.", f"对于{shape}：{NAMES[name]}。"), [FIX])
        bad = [r for r in range(WORLD) if errs[r] > TOL]
        raise Failure(
            msg(
                f"For {shape}: the output of rank {', '.join(map(str, bad))} differs from single-process causal attention "
                f"(max error {max(errs):.3g}; rank {', '.join(str(r) for r in range(WORLD) if r not in bad) or 'none'} right).",
                f"对于{shape}：第 {', '.join(map(str, bad))} 号进程的输出与单进程因果注意力不一致（最大误差 {max(errs):.3g}）。",
            ),
            [FIX],
        )
    model = TinyLongcat(cfg)
    ref_logits = model.forward(ids)
    got_logits = torch.cat([values[r]["logits"] for r in range(WORLD)], 1)
    err = max_err(got_logits, ref_logits)
    if err > 1e-3:
        raise Failure(
            msg(
                f"cp_attention() matches on random tensors but the tiny model's prefill of {ids.shape[1]} tokens on {WORLD} ranks gives other logits (max error {err:.3g}).",
                f"cp_attention() 在随机张量上正确，但微型模型在 {WORLD} 个进程上预填充 {ids.shape[1]} 个 token 时 logits 不一致（最大误差 {err:.3g}）。",
            ),
            [FIX],
        )
    # the technique: every rank's K and V reach the world - 1 other ranks once (a ring of world ranks
    # has world - 1 passes; an all-gather sends each block to world - 1 ranks)
    sent = sent_elements(res)
    for r in range(WORLD):
        calls, need = values[r]["kv_calls"], (WORLD - 1) * values[r]["kv_elems"]
        if sent[r] > need + 16 * calls:
            raise Failure(
                msg(
                    f"The results are right, but rank {r} sent {sent[r]} elements over its {calls} calls of cp_attention(), "
                    f"{sent[r] / need:.2f}x what the KV needs ({need}): each rank's K and V blocks must reach the {WORLD - 1} "
                    f"other ranks once, so a ring of {WORLD} ranks makes {WORLD - 1} passes, not {WORLD}. "
                    "A pass after the last block has been merged moves data nobody uses.",
                    f"结果正确，但第 {r} 号进程在 {calls} 次 cp_attention() 调用中发送了 {sent[r]} 个元素，是 KV 所需（{need}）的 "
                    f"{sent[r] / need:.2f} 倍：每个进程的 K、V 块只需到达其他 {WORLD - 1} 个进程各一次，所以 {WORLD} 个进程的环只需传递 "
                    f"{WORLD - 1} 次，而不是 {WORLD} 次。最后一块合并之后再传一次，传的是没人用的数据。",
                ),
                [FIX],
            )
    return msg(
        f"Context-parallel attention on {WORLD} processes equals single-process causal attention on {len(cases)} shapes (max error {worst:.2g}) and the tiny model's prefill logits (max error {err:.2g}).",
        f"{WORLD} 个进程上的上下文并行注意力与单进程因果注意力一致：{len(cases)} 组形状（最大误差 {worst:.2g}），微型模型预填充的 logits（最大误差 {err:.2g}）。",
    ), {"max_error": worst, "logits_error": err}


if __name__ == "__main__":
    main(check)
