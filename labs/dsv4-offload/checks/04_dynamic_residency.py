"""Step 4: dynamic hot-expert residency. Each layer's top-K of its own prefill counts becomes
resident for decode, within the budget; on unseen prompts H rises well above static; output unchanged."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsv4check as dc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, describe_error, main, msg, run_function  # noqa: E402

K = 32
PROMPT, DECODE = 48, 16
BASE = {"KT_NUM_GPU_EXPERTS": K, "KT_SIDE_STREAM": 0, "KT_PREFILL_STREAM": 0}
HINT_RES = msg(
    "Implement count_activations() and choose_hot_set() in offload/residency.py: one bincount per layer, then each layer's own top-K.",
    "实现 offload/residency.py 中的 count_activations() 和 choose_hot_set()：每层一次 bincount，再取该层自己的前 K 个。",
)
HINT_SWAP = msg(
    "Implement OffloadEngine.set_resident() in offload/engine.py: evict (free) the experts that leave before loading the new ones.",
    "实现 offload/engine.py 中的 OffloadEngine.set_resident()：先驱逐（释放）要离开的专家，再加载新的。",
)


def wrong_layer(layer: int, hot: list[int], counts: torch.Tensor) -> str:
    """Explain a hot set that does not come from ``layer``'s counts (which layer it fits best)."""
    best = max(range(counts.shape[0]), key=lambda j: dc.coverage(counts[j], hot))
    if best != layer:
        return msg(
            f" It matches layer {best}'s counts instead: each layer must use its own counts.",
            f" 它与第 {best} 层的计数吻合：每层必须用自己的计数。",
        )
    return ""


def check_functions() -> None:
    cfg = dc.ckpt().cfg
    g = torch.Generator().manual_seed(dc.run_seed("routing"))
    routing = []
    for _ in range(3):  # three calls per layer (e.g. chunks), skewed differently per layer
        for layer in range(cfg.n_layers):
            probs = torch.rand(cfg.n_routed_experts, generator=g) ** (6 + 2 * layer)
            probs[-3:] = 0.0  # the last experts are never chosen: the counts still have n_experts columns
            routing.append(
                (layer, torch.multinomial(probs, 6 * 20, replacement=True, generator=g).view(20, 6))
            )
    want = dc.counts_of(routing, cfg.n_layers, cfg.n_routed_experts)
    res = run_function(
        "offload/residency.py", "count_activations", routing, cfg.n_layers, cfg.n_routed_experts, timeout=60
    )
    if res.error is not None:
        raise Failure(
            describe_error(res.call, res.error, res.stderr)
            + msg(
                "\nIn this routing the last 3 experts of every layer are never chosen: a layer's row of counts still has "
                "n_experts columns (zeros for the experts nobody chose).",
                "\n这组路由中每层最后 3 个专家从未被选中：每层的计数行仍然要有 n_experts 列（没被选中的专家计 0）。",
            ),
            [HINT_RES],
        )
    got = res.value
    if (
        not isinstance(got, torch.Tensor)
        or tuple(got.shape) != tuple(want.shape)
        or not torch.equal(got.long(), want)
    ):
        bad = [
            j
            for j in range(cfg.n_layers)
            if isinstance(got, torch.Tensor)
            and got.dim() == 2
            and got.shape == want.shape
            and not torch.equal(got[j].long(), want[j])
        ]
        short = bool(bad) and all(int(got[j].sum()) < int(want[j].sum()) for j in bad)
        raise Failure(
            msg(
                f"count_activations() is wrong: expected int [n_layers, n_experts] = {tuple(want.shape)} with each layer's own counts"
                f"{f'; layers {bad} differ' if bad else ''}"
                f"{' and count fewer slots than were routed: every MoE call of a layer (here 3 per layer) adds to its row' if short else ''}.",
                f"count_activations() 不正确：应返回 [n_layers, n_experts] = {tuple(want.shape)}，每层是自己的计数"
                f"{f'；第 {bad} 层不一致' if bad else ''}"
                f"{'，且计数少于实际路由的槽数：同一层的每次 MoE 调用（这里每层 3 次）都要累加到该层' if short else ''}。",
            ),
            [HINT_RES],
        )
    k = dc.run_choice("k", [20, 24, 28])  # not the recipe's 32: k is a parameter
    hot = run_function("offload/residency.py", "choose_hot_set", want, k, timeout=60).unwrap(HINT_RES)
    if not isinstance(hot, torch.Tensor) or tuple(hot.shape) != (cfg.n_layers, k):
        raise Failure(
            msg(
                f"choose_hot_set(counts, k={k}) must return [n_layers, k] = {(cfg.n_layers, k)} expert ids; got "
                f"{getattr(hot, 'shape', type(hot).__name__)}. The hot set has k experts per layer, whatever k is.",
                f"choose_hot_set(counts, k={k}) 必须返回 [n_layers, k] = {(cfg.n_layers, k)} 的专家编号；实际 "
                f"{getattr(hot, 'shape', type(hot).__name__)}。每层的热集合有 k 个专家，k 取什么值都一样。",
            ),
            [HINT_RES],
        )
    check_hot_rows(hot, want, k)


def check_hot_rows(hot: torch.Tensor, want: torch.Tensor, K: int) -> None:
    cfg = dc.ckpt().cfg
    for layer in range(cfg.n_layers):
        ids = [int(e) for e in hot[layer]]
        best = float(want[layer].topk(K).values.sum()) / float(want[layer].sum())
        got_cov = dc.coverage(want[layer], ids)
        if len(set(ids)) != K or got_cov < best - 1e-9:
            raise Failure(
                msg(
                    f"choose_hot_set(): layer {layer}'s hot set covers {100 * got_cov:.1f} % of layer {layer}'s activations; "
                    f"its top-{K} covers {100 * best:.1f} %.{wrong_layer(layer, ids, want)}",
                    f"choose_hot_set()：第 {layer} 层的热集合只覆盖第 {layer} 层 {100 * got_cov:.1f} % 的激活；"
                    f"该层的前 {K} 个覆盖 {100 * best:.1f} %。{wrong_layer(layer, ids, want)}",
                ),
                [HINT_RES],
            )


def check() -> tuple[str, dict[str, float]]:
    check_functions()
    cfg = dc.ckpt().cfg
    # Three prompts in one engine: each swaps in its hot set from the previous one's (not from the
    # static first 32); 48 prompt tokens route 288 slots per layer for the counts, 3 x 16 decode
    # tokens x 4 layers x 6 slots measure H. Over 30 run ids the dynamic/static ratio of the
    # reference routing stays >= 2.66 (the check asks 2; with 8 decode tokens it fell to 2.3, with
    # two prompts to 2.05), where four prompts of 96 + 24 tokens cost twice the CPU for >= 2.97
    reqs = dc.requests(3, PROMPT, DECODE)
    ref, traces = dc.reference_logits(reqs, PROMPT)
    runs = dc.serve_all(
        [
            {
                "reqs": reqs,
                "prefill_len": PROMPT,
                "overrides": {**BASE, "KT_DYNAMIC_RESIDENT": 0},
                "logits": False,
            },
            {"reqs": reqs, "prefill_len": PROMPT, "overrides": {**BASE, "KT_DYNAMIC_RESIDENT": 1}},
        ],
        HINT_SWAP,
    )
    static = runs[0].result()
    dyn = runs[1].result()
    err = dc.compare_logits(dyn, ref, msg("With dynamic residency", "动态驻留时"), HINT_SWAP)
    for i, (req, trace) in enumerate(zip(dyn["requests"], traces, strict=True)):
        counts = dc.counts_of(trace, cfg.n_layers, cfg.n_routed_experts)
        resident = req["resident"]
        if len(resident) != cfg.n_layers:
            raise Failure(
                msg("The engine reports no resident sets per layer.", "引擎没有报告每层的驻留集合。"),
                [HINT_SWAP],
            )
        for layer in range(cfg.n_layers):
            best = float(counts[layer].topk(K).values.sum()) / float(counts[layer].sum())
            got = dc.coverage(counts[layer], resident[layer])
            if len(resident[layer]) != K:
                raise Failure(
                    msg(
                        f"Request {i}: layer {layer} has {len(resident[layer])} resident experts, the budget is {K}.",
                        f"请求 {i}：第 {layer} 层驻留了 {len(resident[layer])} 个专家，预算是 {K} 个。",
                    ),
                    [HINT_SWAP],
                )
            if got < 0.95 * best:
                raise Failure(
                    msg(
                        f"Request {i}: after prefill, layer {layer}'s resident experts cover {100 * got:.1f} % of the prompt's "
                        f"layer-{layer} activations, its top-{K} would cover {100 * best:.1f} %.{wrong_layer(layer, resident[layer], counts)}",
                        f"请求 {i}：预填充后第 {layer} 层的驻留专家只覆盖提示词第 {layer} 层 {100 * got:.1f} % 的激活，"
                        f"该层前 {K} 个可覆盖 {100 * best:.1f} %。{wrong_layer(layer, resident[layer], counts)}",
                    ),
                    [HINT_RES, HINT_SWAP],
                )
    h_static, h_dyn = static["hit_rate"], dyn["hit_rate"]
    if h_dyn < 2 * h_static:
        raise Failure(
            msg(
                f"Dynamic residency should raise the hit rate well above static: H = {h_static:.3f} static vs {h_dyn:.3f} dynamic.",
                f"动态驻留应让命中率明显高于静态：静态 H = {h_static:.3f}，动态 {h_dyn:.3f}。",
            ),
            [HINT_RES, HINT_SWAP],
        )
    return (
        msg(
            f"On prompts you have not seen, H rises from {h_static:.3f} (static first 32) to {h_dyn:.3f} (each prompt's own hot set): "
            f"{h_dyn / h_static:.1f}x the coverage (the talk: about 3x); TPOT {static['tpot_ms']:.2f} -> {dyn['tpot_ms']:.2f} ms; output unchanged.",
            f"在你没见过的提示词上，H 从 {h_static:.3f}（静态前 32 个）升到 {h_dyn:.3f}（每个提示词自己的热集合）："
            f"覆盖率 {h_dyn / h_static:.1f} 倍（演讲中约 3 倍）；TPOT {static['tpot_ms']:.2f} -> {dyn['tpot_ms']:.2f} ms；输出不变。",
        ),
        {
            "hit_rate_static": h_static,
            "hit_rate_dynamic": h_dyn,
            "tpot_static_ms": static["tpot_ms"],
            "tpot_dynamic_ms": dyn["tpot_ms"],
            "max_logit_error": err,
        },
    )


main(check)
