"""Step 3: the adjacent-step top-k overlap, on the model's traces of an unseen text and on
synthetic traces with a known answer (order shuffled, lengths that expose off-by-ones)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import kvcheck as kc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "adjacent_overlap(): for t = 1..T-1, |S_t ∩ S_(t-1)| / |S_t| as sets of positions, then the mean; "
    "mean_overlap(): the mean over every (group, sequence) of the [T, groups, batch, k] trace.",
    "adjacent_overlap()：对 t = 1..T-1 计算位置集合的 |S_t ∩ S_(t-1)| / |S_t|，再取平均；"
    "mean_overlap()：对 [T, 组, 批, k] 轨迹中每个（组, 序列）取平均。",
)
TALK = 0.5885


def synthetic(r: kc.random.Random, T: int, k: int, keep: float) -> torch.Tensor:
    """A [T, k] trace where each step keeps about ``keep`` of the previous selection, in a shuffled order."""
    universe = list(range(4 * k * T))
    cur = r.sample(universe, k)
    rows = [cur]
    for _ in range(T - 1):
        n_keep = sum(r.random() < keep for _ in range(k))
        kept = r.sample(cur, n_keep)
        new = r.sample([u for u in universe if u not in cur], k - n_keep)
        cur = kept + new
        r.shuffle(cur)
        rows.append(cur)
    return torch.tensor(rows)


def ref_adjacent(tr: torch.Tensor) -> float:
    return kc.ref_overlap(tr[:, None, None])


def diagnose(tr: torch.Tensor, got: float) -> str:
    T = tr.shape[0]
    s = [set(x.tolist()) for x in tr]
    jac = sum(len(s[t] & s[t - 1]) / len(s[t] | s[t - 1]) for t in range(1, T)) / (T - 1)
    pos = sum(float((tr[t] == tr[t - 1]).float().mean()) for t in range(1, T)) / (T - 1)
    with0 = sum(len(s[t] & s[t - 1]) / len(s[t]) for t in range(1, T)) / T
    if abs(got - jac) < 1e-9:
        return msg(
            " That is the Jaccard index (divided by the union): the reuse is the share of the *current* selection.",
            " 这是 Jaccard 系数（除以并集）：复用率是*当前*选择中的占比。",
        )
    if abs(got - pos) < 1e-9:
        return msg(
            " That compares the lists element by element; top-k comes in no particular order: compare sets.",
            " 这是逐元素比较列表；top-k 没有固定顺序：要比较集合。",
        )
    if abs(got - with0) < 1e-9:
        return msg(
            " That divides by T: step 0 has no previous step and must not count.",
            " 这是除以 T：第 0 步没有前一步，不能计入。",
        )
    return ""


def check() -> tuple[str, dict[str, float]]:
    r = kc.rng("overlap")
    synth = [synthetic(r, r.randrange(2, 40), r.choice([8, 16, 32]), r.uniform(0.2, 0.9)) for _ in range(6)]
    synth.append(
        torch.tensor([[3, 1, 2, 0], [0, 1, 2, 3], [7, 6, 5, 4]])
    )  # same set reordered, then disjoint
    # two texts x two groups: four streams, enough to tell one mean over all from the first
    # sequence's (one more text only added a prefill)
    trace = kc.model_trace(kc.run_seed("overlap-model"), 2, 33)
    calls = kc.Calls(
        [
            ("many", ["kvoff.overlap", "adjacent_overlap", [([t], {}) for t in synth]]),
            ("many", ["kvoff.overlap", "mean_overlap", [([trace], {})]]),
        ],
        HINT,
    )
    for tr, g in zip(synth, calls[0], strict=False):
        want = ref_adjacent(tr)
        if not isinstance(g, (int, float)) or abs(g - want) > 1e-9:
            raise Failure(
                msg(
                    f"adjacent_overlap() of a {tr.shape[0]}-step trace of top-{tr.shape[1]} gave {g}, expected {want:.6f}."
                    + (diagnose(tr, g) if isinstance(g, (int, float)) else ""),
                    f"adjacent_overlap() 对 {tr.shape[0]} 步、top-{tr.shape[1]} 的轨迹给出 {g}，应为 {want:.6f}。"
                    + (diagnose(tr, g) if isinstance(g, (int, float)) else ""),
                ),
                [HINT],
            )
    g = calls[1][0]
    want = kc.ref_overlap(trace)
    if not isinstance(g, (int, float)) or abs(g - want) > 1e-9:
        raise Failure(
            msg(
                f"mean_overlap() of the model's trace {tuple(trace.shape)} (steps, groups, sequences, k) gave {g}, "
                f"expected {want:.6f}: one mean over every group and sequence, each compared with its own previous step.",
                f"mean_overlap() 对模型轨迹 {tuple(trace.shape)}（步, 组, 序列, k）给出 {g}，应为 {want:.6f}："
                "对每个组和序列分别与它自己的前一步比较，再整体取平均。",
            ),
            [HINT],
        )
    return (
        msg(
            f"Adjacent decode steps of the toy reuse {want:.1%} of their top-k (emulated, an unseen text); "
            f"the talk measured {TALK:.2%} on GLM-5.2's traces. That is also the hit rate of a pool that keeps only the previous step's selection.",
            f"玩具模型相邻解码步的 top-k 复用率为 {want:.1%}（未见过的文本）；演讲在 GLM-5.2 的轨迹上测得 {TALK:.2%}。"
            "这也是只保留上一步选择的池的命中率。",
        ),
        {"overlap": want, "talk_overlap": TALK},
    )


main(check)
