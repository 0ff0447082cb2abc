"""Step 1: the planner ran: plan.json shows the naive deployment's OOM and a plan that fits,
with every tag's size equal to what the checker computes from the model's shapes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsv4check as dc  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402

RUN = msg(
    "Run `bash recipe/scripts/launch_ds4flash_npu.sh --plan-only` in the terminal.",
    "在终端运行 `bash recipe/scripts/launch_ds4flash_npu.sh --plan-only`。",
)


def expected_tags(recipe: dict) -> dict[str, int]:
    c = dc.ckpt().cfg
    w8, mx = dc.expert_bytes()
    d, hd = c.d_model, c.head_dim
    attn = (
        (c.n_heads * hd * d + c.n_heads * hd * 4)
        + 2 * (c.n_kv_heads * hd * d + c.n_kv_heads * hd * 4)
        + (d * c.n_heads * hd + d * 4)
    )
    return {
        "embed_lm_head": 2 * c.vocab_size * d * 2,
        "norms": (2 * c.n_layers + 1) * d * 4,
        "attention": c.n_layers * attn,
        "router": c.n_layers * c.n_routed_experts * d * 2,
        "shared_experts": c.n_layers * c.n_shared_experts * w8,
        "hot_experts": c.n_layers * int(recipe["KT_NUM_GPU_EXPERTS"]) * w8,
        "kv_cache": int(recipe["CONTEXT_LENGTH"]) * c.n_layers * 2 * c.n_kv_heads * hd * 2,
        "prefill_stream": int(recipe["KT_PREFILL_STREAM_CHUNK"]) * (mx + w8),
    }


#: which recipe value each planned tag follows
FOLLOWS = {
    "hot_experts": "KT_NUM_GPU_EXPERTS",
    "kv_cache": "CONTEXT_LENGTH",
    "prefill_stream": "KT_PREFILL_STREAM_CHUNK",
}
FIX = msg(
    "Fix plan_memory() in offload/plan.py, then run the planner again.",
    "修改 offload/plan.py 的 plan_memory()，再运行规划器。",
)


def check_other_recipe() -> dict[str, int]:
    """plan_memory() itself, on a recipe of this run (the defaults alone cannot tell a value taken
    from the recipe from one typed in)."""
    varied = {
        "KT_NUM_GPU_EXPERTS": dc.run_choice("k", [16, 20, 24, 28]),
        "CONTEXT_LENGTH": dc.run_choice("ctx", [256, 384, 512, 640]),
        "KT_PREFILL_STREAM_CHUNK": dc.run_choice("chunk", [4, 8, 12]),
    }
    got = dc.harness("plan_tags", varied, call="offload/plan.py: plan_memory()", hint=FIX)
    want = expected_tags(varied)
    for tag, n in want.items():
        if not isinstance(got, dict) or got.get(tag) != n:
            value = got.get(tag) if isinstance(got, dict) else got
            param = FOLLOWS.get(tag)
            why = (
                msg(
                    f" It must follow {param} = {varied[param]} of the recipe (the default is 32, 768 or 16), not a fixed number.",
                    f" 它必须随配方中的 {param} = {varied[param]} 变化（默认值为 32、768 或 16），而不是一个固定的数。",
                )
                if param
                else ""
            )
            raise Failure(
                msg(
                    f"plan_memory() with {varied}: tag {tag!r} is {value} bytes, the checker computes {n}.{why}",
                    f"plan_memory() 在 {varied} 下：{tag!r} 为 {value} 字节，检查器算出 {n}。{why}",
                ),
                [FIX],
            )
    return varied


def check() -> tuple[str, dict[str, float]]:
    plan = dc.read_json("plan.json", RUN)
    full = plan.get("full_model") or {}
    expect(
        "out of memory" in str(full.get("oom", "")),
        msg(
            "plan.json has no out-of-memory error for the naive deployment: the planner must first try "
            "to put the whole model on the card.",
            "plan.json 里没有整模型部署的内存不足错误：规划器应先尝试把整个模型放上卡。",
        ),
        [RUN],
    )
    holders = full.get("holders") or []
    expect(
        bool(holders) and holders[0][0] == "routed_experts",
        msg(
            "The out-of-memory error should name the routed experts as the biggest holder.",
            "内存不足错误应指出路由专家是占用最大的部分。",
        ),
        [RUN],
    )
    recipe = plan.get("recipe") or {}
    try:
        want = expected_tags(recipe)
    except (KeyError, TypeError, ValueError) as exc:
        raise Failure(
            msg(
                f"plan.json has no usable recipe section ({exc}).",
                f"plan.json 缺少可用的 recipe 部分（{exc}）。",
            ),
            [RUN],
        ) from exc
    tags = plan.get("tags") or {}
    for tag, n in want.items():
        got = tags.get(tag)
        if got != n:
            why = {
                "hot_experts": msg(
                    "K experts per layer x layers x one expert's W8A8 bytes (int8 values + fp32 scale per output row of gate_up and down).",
                    "每层 K 个专家 × 层数 × 一个专家的 W8A8 字节数（int8 数值 + gate_up 和 down 每个输出行一个 fp32 scale）。",
                ),
                "kv_cache": msg(
                    "CONTEXT_LENGTH x layers x (K and V) x KV heads x head_dim x 2 bytes (bf16).",
                    "CONTEXT_LENGTH × 层数 × (K 和 V) × KV 头数 × head_dim × 2 字节（bf16）。",
                ),
                "prefill_stream": msg(
                    "one chunk of KT_PREFILL_STREAM_CHUNK experts, in MXFP4 (17 B per 32 values) plus their W8A8 conversion.",
                    "一个分块 KT_PREFILL_STREAM_CHUNK 个专家：MXFP4（每 32 个值 17 字节）加上转换后的 W8A8。",
                ),
            }.get(tag, "")
            raise Failure(
                msg(
                    f"plan.json: tag {tag!r} is {got} bytes, the checker computes {n}. {why}",
                    f"plan.json：{tag!r} 为 {got} 字节，检查器算出 {n}。{why}",
                ),
                [FIX],
            )
    check_other_recipe()
    capacity = int(plan.get("capacity_bytes", 0))
    total = sum(want.values())
    expect(
        total <= capacity and plan.get("fits") is True,
        msg(
            f"The plan needs {total} B but the card has {capacity} B.",
            f"计划需要 {total} B，但卡只有 {capacity} B。",
        ),
        [
            msg(
                "Keep KT_NUM_GPU_EXPERTS at 32 and CONTEXT_LENGTH at 768 as the recipe says.",
                "按配方保持 KT_NUM_GPU_EXPERTS=32、CONTEXT_LENGTH=768。",
            )
        ],
    )
    static = sum(v for k, v in want.items() if k not in ("kv_cache", "prefill_stream"))
    frac = static / capacity
    return (
        msg(
            f"The full model does not fit ({full['holders'][0][0]} hold {full['holders'][0][1]} B when it runs out); the plan "
            f"puts {100 * frac:.1f} % of the card in static weights (real: 48.3 of 64 GB = 75.5 %) and fits.",
            f"整模型放不下（内存耗尽时 {full['holders'][0][0]} 占 {full['holders'][0][1]} B）；计划的静态权重占卡的 "
            f"{100 * frac:.1f} %（真实部署：64 GB 中 48.3 GB = 75.5 %），能放下。",
        ),
        {"static_fraction": frac, "plan_bytes": float(total), "capacity_bytes": float(capacity)},
    )


main(check)
