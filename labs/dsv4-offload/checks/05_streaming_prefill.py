"""Step 5: streaming prefill. Long prompts stream every layer's cold experts through the card
(within the budget, same output); prefill.json holds numbers the run produces; the recipe's
threshold sits at the crossover."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsv4check as dc  # noqa: E402
from dsv4flash.corpus import TOPICS  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "Implement use_streaming() and moe_streaming() in offload/engine.py (the step 5 TODOs).",
    "实现 offload/engine.py 中的 use_streaming() 和 moe_streaming()（第 5 步的 TODO）。",
)
RUN = msg(
    "Run `python bench_prefill.py`, then set KT_PREFILL_STREAM=1 and KT_PREFILL_STREAM_THRESHOLD to the crossover in recipe/config/dsv4_flash_toy.env.",
    "运行 `python bench_prefill.py`，然后在 recipe/config/dsv4_flash_toy.env 中设置 KT_PREFILL_STREAM=1，并把 KT_PREFILL_STREAM_THRESHOLD 设为交叉点。",
)
STREAM = {
    "KT_NUM_GPU_EXPERTS": 32,
    "KT_SIDE_STREAM": 0,
    "KT_DYNAMIC_RESIDENT": 0,
    "KT_PREFILL_STREAM": 1,
    "KT_PREFILL_STREAM_THRESHOLD": 128,
}


def env_file() -> dict[str, str]:
    out = {}
    path = Path("recipe/config/dsv4_flash_toy.env")
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip().removeprefix("export ").strip()
            if "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip().strip("'\"")
    return out


def prefill_ms(n: int, stream: bool) -> float:
    reqs = dc.requests(1, n, 0, seed=1, first=list(TOPICS).index("music"))
    got = dc.serve(
        reqs, n, {"KT_PREFILL_STREAM": int(stream), "KT_PREFILL_STREAM_THRESHOLD": 1}, HINT, logits=False
    )
    return float(got["requests"][0]["prefill_ms"])


def check() -> tuple[str, dict[str, float]]:
    bench = dc.read_json("prefill.json", RUN)
    cfg = dc.ckpt().cfg
    w8, mx = dc.expert_bytes()
    long_reqs = dc.requests(1, 160, 0, first=5)
    ref, _ = dc.reference_logits(long_reqs, 160)
    got = dc.serve(long_reqs, 160, STREAM, HINT)
    req = got["requests"][0]
    if not req["streamed_prefill"]:
        raise Failure(
            msg(
                "A 160-token prompt with KT_PREFILL_STREAM=1 and threshold 128 was not streamed.",
                "KT_PREFILL_STREAM=1、阈值 128 时，160 个 token 的提示词没有走流式预填充。",
            ),
            [HINT],
        )
    err = dc.compare_logits(got, ref, msg("Streaming prefill", "流式预填充"), HINT)
    streamed = got["op_bytes"].get("h2d:expert_stream", 0.0)
    want = cfg.n_layers * (cfg.n_routed_experts - 32) * mx
    if int(streamed) != want:
        raise Failure(
            msg(
                f"The streaming prefill copied {int(streamed)} B of experts to the card; every layer's {cfg.n_routed_experts - 32} "
                f"non-resident experts in MXFP4 are {want} B (use stream_in() for each chunk, once).",
                f"流式预填充向卡上复制了 {int(streamed)} B 专家；每层 {cfg.n_routed_experts - 32} 个非驻留专家的 MXFP4 共 {want} B"
                "（每个分块调用一次 stream_in()）。",
            ),
            [HINT],
        )
    if got["engines_busy_ms"].get("host", 0.0) > 0:
        raise Failure(
            msg(
                "A streamed prefill should not compute experts on the CPU: every expert runs on the card.",
                "流式预填充不应在 CPU 上计算专家：所有专家都在卡上运行。",
            ),
            [HINT],
        )
    short = dc.serve(dc.requests(1, 48, 2, first=6), 48, STREAM, HINT, logits=False)
    if short["requests"][0]["streamed_prefill"]:
        raise Failure(
            msg(
                "A 48-token prompt was streamed although the threshold is 128.",
                "阈值为 128 时，48 个 token 的提示词也走了流式预填充。",
            ),
            [HINT],
        )
    try:
        lengths = [int(n) for n in bench["lengths"]]
        hybrid = [float(v) for v in bench["hybrid_ms"]]
        stream = [float(v) for v in bench["stream_ms"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise Failure(
            msg(
                f"prefill.json lacks lengths / hybrid_ms / stream_ms ({exc}).",
                f"prefill.json 缺少 lengths / hybrid_ms / stream_ms（{exc}）。",
            ),
            [RUN],
        ) from exc
    for n, name, values, is_stream in (
        (lengths[1], "hybrid_ms", hybrid, False),
        (lengths[-2], "stream_ms", stream, True),
    ):
        # rerun on the machine that wrote prefill.json: the hybrid time depends on routing
        # decisions (another CPU moved the 96-token figure by 1.1 of 2919 ms), not on the clock
        mine = prefill_ms(n, is_stream)
        theirs = values[lengths.index(n)]
        if abs(mine - theirs) > 1e-3 * mine:
            raise Failure(
                msg(
                    f"prefill.json says {name} = {theirs:.1f} ms at {n} tokens; the checker measures {mine:.1f} ms. Run bench_prefill.py again after your last change.",
                    f"prefill.json 中 {n} 个 token 的 {name} = {theirs:.1f} ms；检查器测得 {mine:.1f} ms。修改后请重新运行 bench_prefill.py。",
                ),
                [RUN],
            )
    lo = max((n for n, h, s in zip(lengths, hybrid, stream, strict=True) if h <= s), default=0)
    hi = min((n for n, h, s in zip(lengths, hybrid, stream, strict=True) if s < h), default=None)
    if hi is None:
        raise Failure(
            msg("prefill.json shows no length where streaming wins.", "prefill.json 中没有流式更快的长度。"),
            [HINT],
        )
    env = env_file()
    try:
        on, thr = int(env.get("KT_PREFILL_STREAM", "0")), int(env.get("KT_PREFILL_STREAM_THRESHOLD", "0"))
    except ValueError as exc:
        raise Failure(
            msg(f"recipe/config/dsv4_flash_toy.env: {exc}", f"recipe/config/dsv4_flash_toy.env：{exc}"), [RUN]
        ) from exc
    if on != 1 or not lo < thr <= hi:
        raise Failure(
            msg(
                f"recipe/config/dsv4_flash_toy.env has KT_PREFILL_STREAM={on}, KT_PREFILL_STREAM_THRESHOLD={thr}; your measurements put the "
                f"crossover between {lo} and {hi} tokens (the real recipe's 512 is for an A3 with its measured ~15 s streaming cost).",
                f"recipe/config/dsv4_flash_toy.env 中 KT_PREFILL_STREAM={on}、KT_PREFILL_STREAM_THRESHOLD={thr}；你的测量显示交叉点在 "
                f"{lo} 到 {hi} 个 token 之间（真实配方的 512 针对 A3，流式固定开销实测约 15 s）。",
            ),
            [RUN],
        )
    n_long = lengths[-1]
    speedup = hybrid[-1] / stream[-1]
    return (
        msg(
            f"Streaming prefill works (same output, max |Δlogit| {err:.4f} x std, within the budget); crossover between {lo} and {hi} tokens, "
            f"threshold {thr}; at {n_long} tokens streaming is {speedup:.1f}x faster (the talk: 4096 tokens in ~14 s vs ~137 s, ~8x).",
            f"流式预填充正确（输出一致，max |Δlogit| {err:.4f} 倍标准差，未超预算）；交叉点在 {lo} 到 {hi} 个 token 之间，阈值 {thr}；"
            f"{n_long} 个 token 时流式快 {speedup:.1f} 倍（演讲：4096 个 token 约 14 s 对约 137 s，约 8 倍）。",
        ),
        {
            "crossover_lo": float(lo),
            "crossover_hi": float(hi),
            "threshold": float(thr),
            "long_prefill_speedup": speedup,
            "max_logit_error": err,
        },
    )


main(check)
