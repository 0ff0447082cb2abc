"""Step 4: the LRU pool and the set-associative FIFO, replayed on the model's traces of an
unseen text and on small adversarial traces (many evictions, full sets), step by step against
the rules; then the hit-rate table the attendee's hit_rates() computes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import kvcheck as kc  # noqa: E402
from labkit import dsa  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "kvoff/pool.py: classify() returns a Plan (hit, slot per position) and updates the metadata: misses are installed "
    "(LRU: into a free slot or the least recently used one; FIFO: the slot under the set's pointer, which advances), "
    "an evicted position leaves the lookup table, hits refresh LRU order but change nothing in the FIFO.",
    "kvoff/pool.py：classify() 返回 Plan（每个位置的命中与槽位）并更新元数据：未命中要装入"
    "（LRU：空槽或最久未用的槽；FIFO：组指针所指的槽，指针随后前进），被淘汰的位置要移出查找表，"
    "命中刷新 LRU 顺序，但不改变 FIFO 的任何状态。",
)
K = kc.CFG.topk
SIZES = [K, 4 * K, 8 * K]  # the talk's 2K / 8K / 16K pools for top-2048, scaled to top-32
TALK = {"lru": {4 * K: 0.905}, "fifo": {4 * K: 0.85, 8 * K: 0.90}}


def adversarial(r: kc.random.Random, n_steps: int, k: int, universe: int) -> list[list[int]]:
    return [r.sample(range(universe), k) for _ in range(n_steps)]


def verify(policy: str, n_slots: int, streams: list[list[list[int]]], plans: list) -> None:
    label = {"lru": "LRUPool", "fifo": "SetAssocFIFO"}[policy]
    for si, (steps, got) in enumerate(zip(streams, plans, strict=False)):
        ref = kc.ref_lru(n_slots, steps) if policy == "lru" else kc.ref_fifo(n_slots, steps)
        content: dict[int, tuple[int, int]] = {}  # slot -> (position, step installed)
        for t, (ids, (hit, slot), want) in enumerate(zip(steps, got, ref, strict=False)):
            where = msg(
                f"{label}({n_slots}), trace {si}, step {t}", f"{label}({n_slots})，轨迹 {si}，第 {t} 步"
            )
            if len(hit) != len(ids) or len(slot) != len(ids):
                raise Failure(
                    msg(
                        f"{where}: the plan has {len(hit)} hits / {len(slot)} slots for {len(ids)} positions.",
                        f"{where}：plan 对 {len(ids)} 个位置给出了 {len(hit)} 个命中标记、{len(slot)} 个槽位。",
                    ),
                    [HINT],
                )
            for i, h, s in zip(ids, hit, slot, strict=False):
                if h and content.get(s, (None, 0))[0] != i:
                    held = content.get(s)
                    has = (
                        msg(
                            f"which holds position {held[0]} since step {held[1]}",
                            f"它从第 {held[1]} 步起存的是位置 {held[0]}",
                        )
                        if held
                        else msg("which was never filled", "它从未被填入")
                    )
                    raise Failure(
                        msg(
                            f"{where}: position {i} is served as a hit from slot {s}, {has}: stale KV after eviction. "
                            "When a miss takes a slot, the position it evicts must leave the lookup table.",
                            f"{where}：位置 {i} 作为命中从槽 {s} 读取，{has}：淘汰后返回了过期的 KV。"
                            "未命中占用一个槽时，被它淘汰的位置必须移出查找表。",
                        ),
                        [HINT],
                    )
            if hit != want:
                n = next(j for j in range(len(ids)) if hit[j] != want[j])
                extra = ""
                if policy == "fifo" and hit == kc.ref_fifo(n_slots, steps, hits_advance=True)[t]:
                    extra = msg(
                        " Your hits move the set's pointer: hits must not update FIFO state.",
                        " 你的命中移动了组指针：命中不能更新 FIFO 状态。",
                    )
                elif policy == "fifo" and hit == kc.ref_fifo(n_slots, steps, hash_sets=False)[t]:
                    extra = msg(
                        " Your sets are `pos % n_sets`: use dsa.set_index(pos, n_sets).",
                        " 你的组号是 `pos % n_sets`：请用 dsa.set_index(pos, n_sets)。",
                    )
                elif not any(any(h) for h, _ in got):
                    extra = msg(
                        " Nothing ever hits: the misses are never installed.",
                        " 从未命中：未命中的条目从没有装入池中。",
                    )
                raise Failure(
                    msg(
                        f"{where}: position {ids[n]} is a {'hit' if hit[n] else 'miss'} in your pool, a "
                        f"{'hit' if want[n] else 'miss'} by the rules (hits do not update FIFO state; LRU hits refresh)."
                        + extra,
                        f"{where}：位置 {ids[n]} 在你的池中是{'命中' if hit[n] else '未命中'}，按规则应为"
                        f"{'命中' if want[n] else '未命中'}（命中不更新 FIFO 状态；LRU 命中要刷新）。"
                        + extra,
                    ),
                    [HINT],
                )
            for i, h, s in zip(ids, hit, slot, strict=False):
                if not h:
                    if not 0 <= s < n_slots:
                        raise Failure(
                            msg(
                                f"{where}: miss {i} got slot {s}, outside 0..{n_slots - 1}: misses must be installed.",
                                f"{where}：未命中 {i} 的槽位是 {s}，不在 0..{n_slots - 1} 内：未命中必须装入。",
                            ),
                            [HINT],
                        )
                    if policy == "fifo" and s // 8 != dsa.set_index(i, n_slots // 8):
                        raise Failure(
                            msg(
                                f"{where}: miss {i} went to slot {s}, outside its set {dsa.set_index(i, n_slots // 8)} "
                                "(slots set*ways .. set*ways+ways-1): a position's set is dsa.set_index(pos, n_sets).",
                                f"{where}：未命中 {i} 装到了槽 {s}，不在它的组 {dsa.set_index(i, n_slots // 8)} 内"
                                "（槽 set*ways .. set*ways+ways-1）：位置所在的组是 dsa.set_index(pos, n_sets)。",
                            ),
                            [HINT],
                        )
                    content[s] = (i, t)


def check() -> tuple[str, dict[str, float]]:
    r = kc.rng("pool")
    trace = kc.model_trace(kc.run_seed("pool-model"), 2, 40)
    T, G, B, _ = trace.shape
    model_streams = [[trace[t, g, b].tolist() for t in range(T)] for g in range(G) for b in range(B)]
    small = [adversarial(r, 30, K, r.choice([2 * K, 4 * K, 9 * K])) for _ in range(3)]
    streams = model_streams + small
    jobs = [(policy, n) for policy in ("lru", "fifo") for n in (K, 4 * K)]
    calls = kc.Calls(
        [("replays", [jobs, streams]), ("many", ["kvoff.pool", "hit_rates", [([trace, SIZES], {})]])], HINT
    )
    for (policy, n_slots), plans in zip(jobs, calls[0], strict=False):
        verify(policy, n_slots, streams, plans)
    rates = calls[1][0]
    table = []
    for policy in ("lru", "fifo"):
        for n in SIZES:
            want = kc.ref_hit_rate(trace, policy, n)
            g = rates.get(policy, {}).get(n) if isinstance(rates, dict) else None
            if not isinstance(g, (int, float)) or abs(g - want) > 1e-9:
                raise Failure(
                    msg(
                        f"hit_rates() gave {g} for {policy} with {n} slots on an unseen trace; replaying your pool gives {want:.4f}. "
                        "Compute the table from the trace you are given (steps 1..T-1, one fresh pool per group and sequence).",
                        f"hit_rates() 在未见过的轨迹上对 {policy}、{n} 个槽给出 {g}；重放你的池得到 {want:.4f}。"
                        "请从给定的轨迹计算表格（第 1..T-1 步，每个组和序列一个新池）。",
                    ),
                    [HINT],
                )
            table.append((policy, n, want))
    ov = kc.ref_overlap(trace)
    rows = ", ".join(f"{p} {n * 64 // 1024}K-scaled {v:.1%}" for p, n, v in table)
    metrics = {f"{p}_{n}": v for p, n, v in table}
    return (
        msg(
            f"Both pools follow the rules. Hit rates on an unseen text ({rows}); adjacent-step overlap {ov:.1%}. "
            "The talk: previous step only 58.85 %, 8K LRU 90.5 %, 8K set-associative FIFO ~85 %, 16K FIFO > 90 %.",
            f"两种池都符合规则。未见过的文本上的命中率（{rows}）；相邻步重叠 {ov:.1%}。"
            "演讲：只保留上一步 58.85 %，8K LRU 90.5 %，8K 组相联 FIFO 约 85 %，16K FIFO > 90 %。",
        ),
        metrics,
    )


main(check)
