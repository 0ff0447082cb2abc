"""Step 1: the memory plan of the baseline (the whole KV cache on the device) and its emulated
throughput, on configurations and capacities the attendee has not seen."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import kvcheck as kc  # noqa: E402
from labkit import dsa  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "Fill in kv_bytes_per_seq(), max_batch() and tokens_per_s() in kvoff/baseline.py; run `python run.py baseline`.",
    "补全 kvoff/baseline.py 中的 kv_bytes_per_seq()、max_batch() 和 tokens_per_s()；运行 `python run.py baseline`。",
)
STEPS, WARMUP = 16, 4


def cases() -> list[tuple[dsa.DSAConfig, int, int]]:
    r = kc.rng("baseline")
    out = []
    for i in range(5):
        cfg = dsa.DSAConfig(
            n_layers=r.choice([4, 8, 12]),
            idx_dim=r.choice([8, 16, 32]),
            head_dim=r.choice([8, 16, 32]),
            topk=r.choice([16, 32, 64]),
        )
        total = r.randrange(256, 4096)
        n = r.randrange(1, 9)
        exact = dsa.ToyDSA(cfg).weight_bytes() + n * kc.ref_kv_bytes(cfg, total)
        # on the boundary (exactly n fit), one byte short of it, and somewhere in between
        cap = [exact, exact - 1, exact + r.randrange(1, kc.ref_kv_bytes(cfg, total))][i % 3]
        out.append((cfg, cap, total))
    # nothing fits: one byte short of a single sequence's KV alone (its indexer keys left out too),
    # and less than the weights themselves
    w = dsa.ToyDSA(cfg).weight_bytes()
    out += [(cfg, w + cfg.n_layers * total * cfg.kv_entry_bytes - 1, total), (cfg, w - 1, total)]
    out.append((kc.CFG, kc.capacity(), kc.PROMPT + 64))
    return out


def diagnose(cfg: dsa.DSAConfig, cap: int, total: int, got: object) -> str:
    w = dsa.ToyDSA(cfg).weight_bytes()
    kv_only = cfg.n_layers * total * cfg.kv_entry_bytes
    per = kc.ref_kv_bytes(cfg, total)
    if got == 1 and kc.ref_max_batch(cfg, cap, total) == 0:
        return msg(
            " Not even one sequence fits here: the answer can be 0, it is not at least 1.",
            "这里连一个序列都放不下：答案可以是 0，而不是至少为 1。",
        )
    if got == (cap - w) // kv_only:
        return msg(
            " It matches a plan without the indexer's key cache (one per layer group): it lives on the device too.",
            "它与漏掉索引器键缓存（每个层组一份）的规划一致：索引器键缓存也在卡上。",
        )
    if got == cap // per:
        return msg(" It matches a plan that forgets the weights.", "它与忘了算权重的规划一致。")
    if got == (cap - w) // per + 1:
        return msg(
            " One sequence too many: the batch must fit, not just come close.",
            "多了一个序列：批必须放得下，而不是接近。",
        )
    if got == (cap - w) // per - 1:
        return msg(
            " One sequence too few: a batch that fits exactly is allowed.",
            "少了一个序列：刚好放得下的批是允许的。",
        )
    return ""


def check() -> tuple[str, dict[str, float]]:
    cs = cases()
    r = kc.rng("tok")
    tcases = [(r.randrange(1, 64), r.randrange(1, 500), r.uniform(1.0, 5000.0)) for _ in range(4)]
    b0 = kc.ref_max_batch(kc.CFG, kc.capacity(), kc.PROMPT + STEPS)
    # The baseline's emulated time and memory depend on shapes only (batch, positions), never on
    # the text: one unseen text in every one of the b0 rows shows the same fit and the same tok/s
    # as b0 different ones, for one prefill instead of b0.
    tokens, pre = kc.tiled(kc.run_seed("base-run"), 1, b0, STEPS)
    calls = kc.Calls(
        [
            kc.decode_call(
                "device", tokens, pre, warmup=WARMUP
            ),  # first: before any other function of theirs
            ("many", ["kvoff.baseline", "max_batch", [([c, cap, t], {}) for c, cap, t in cs]]),
            ("many", ["kvoff.baseline", "tokens_per_s", [(list(c), {}) for c in tcases]]),
        ],
        HINT,
    )
    for (cfg, cap, total), g in zip(cs, calls[1], strict=False):
        want = kc.ref_max_batch(cfg, cap, total)
        if g != want:
            raise Failure(
                msg(
                    f"max_batch() gave {g} for {cfg.n_layers} layers (groups of {cfg.group}), kv entry {cfg.kv_entry_bytes} B, "
                    f"indexer key {cfg.idx_entry_bytes} B, {total} positions and {cap} B of device memory; {want} fit."
                    + diagnose(cfg, cap, total, g),
                    f"max_batch() 对 {cfg.n_layers} 层（每组 {cfg.group} 层）、KV 条目 {cfg.kv_entry_bytes} B、索引器键 "
                    f"{cfg.idx_entry_bytes} B、{total} 个位置和 {cap} B 设备内存给出 {g}；实际放得下 {want}。"
                    + diagnose(cfg, cap, total, g),
                ),
                [HINT],
            )
    for (b, n, ms), v in zip(tcases, calls[2], strict=False):
        want = b * n / (ms / 1e3)
        if not isinstance(v, (int, float)) or abs(v - want) > 1e-6 * want:
            extra = ""
            if isinstance(v, (int, float)) and abs(v - n / (ms / 1e3)) <= 1e-6 * want:
                extra = msg(
                    " That is steps per second: every step makes one token per sequence of the batch.",
                    " 这是每秒步数：每一步为批中每个序列各生成一个 token。",
                )
            raise Failure(
                msg(
                    f"tokens_per_s({b}, {n}, {ms:.3f}) gave {v}, expected {want:.3f} tokens per second.{extra}",
                    f"tokens_per_s({b}, {n}, {ms:.3f}) 给出 {v}，应为每秒 {want:.3f} 个 token。{extra}",
                ),
                [HINT],
            )
    run = calls[0]
    kc.oom(run, msg("The baseline", "基线"), HINT)
    tok_s = b0 * (STEPS - WARMUP) / (run["elapsed_ms"] / 1e3)
    per = kc.ref_kv_bytes(kc.CFG, kc.PROMPT + STEPS)
    return (
        msg(
            f"Baseline: {b0} sequences of {kc.PROMPT + STEPS} positions fit the emulated {kc.capacity() / 2**20:.0f} MiB "
            f"({per / 2**20:.2f} MiB of KV + indexer keys each, {b0 + 1} would not); emulated decode {tok_s:.1f} tok/s. "
            "The talk (GLM-5.2 on 2 x Atlas A3, 64K input): global batch 64, 2,427 tok/s.",
            f"基线：{b0} 条 {kc.PROMPT + STEPS} 个位置的序列放得进仿真的 {kc.capacity() / 2**20:.0f} MiB"
            f"（每条 KV + 索引器键 {per / 2**20:.2f} MiB，{b0 + 1} 条放不下）；仿真解码 {tok_s:.1f} tok/s。"
            "演讲（GLM-5.2，2 台 Atlas A3，64K 输入）：全局批 64，2,427 tok/s。",
        ),
        {"max_batch": b0, "tok_s": tok_s},
    )


main(check)
