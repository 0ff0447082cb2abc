"""Step 4: a 4-stage prefill pipeline on gloo ranks: the last stage's output equals the
single-process forward; the micro-batches flow as soon as they are computed (the emulated
makespan is the pipeline's, recomputed here from the ranks' clocks); the bubble the attendee
reports is the one measured on those clocks, on batches of this run (uneven micro-batches and a
single micro-batch included)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import torch  # noqa: E402
from labkit.check import main  # noqa: E402
from labkit.longcat import TinyLongcat, TinyLongcatConfig  # noqa: E402
from lc_harness import link_bytes_per_s, stage_cost  # noqa: E402
from lccheck import WORLD, Failure, choice, max_err, msg, ranks, rng, run_seed  # noqa: E402

#: activations travel between stages over HCCS (A2 intra-node, UNVERIFIED), as full-size chunks
LINK = link_bytes_per_s(TinyLongcatConfig())
FIX = msg("Fix pipeline_prefill() in pipeline.py.", "修改 pipeline.py 中的 pipeline_prefill()。")


def segments(events: list[dict]) -> list[list[dict]]:
    out: list[list[dict]] = []
    for e in events:
        if e["ev"] == "reset":
            out.append([])
        elif out:
            out[-1].append(e)
    return out


def ideal_makespan(m: TinyLongcat, sizes: list[int], s: int) -> float:
    """Stage p starts micro-batch j when it has arrived and stage p finished j - 1."""
    done = [[0.0] * len(sizes) for _ in range(WORLD)]
    for p in range(WORLD):
        for j, n in enumerate(sizes):
            arrive = 0.0 if p == 0 else done[p - 1][j] + n * s * m.cfg.d_model * 4 / LINK
            start = max(arrive, done[p][j - 1] if j else 0.0)
            done[p][j] = start + stage_cost(n * s)
    return done[-1][-1]


def check() -> tuple[str, dict[str, float]]:
    g = rng("batches")
    cases = []
    for b, n_micro in [(choice("b0", [8, 12]), 4), (choice("b1", [5, 7]), 4), (choice("b2", [3, 4]), 1)]:
        s = int(torch.randint(3, 7, (1,), generator=g))
        cases.append(
            {
                "seed": run_seed(f"m{b}") % 1000,
                "ids": torch.randint(0, 64, (b, s), generator=g).tolist(),
                "n_micro": n_micro,
            }
        )
    values, res = ranks("pp", cases, file_hint="pipeline.py: pipeline_prefill()", link_bytes_per_s=LINK)
    segs = [segments(r.events) for r in res.ranks]
    report = []
    for c_i, c in enumerate(cases):
        m = TinyLongcat(TinyLongcatConfig(seed=c["seed"], n_layers=WORLD))
        ids = torch.tensor(c["ids"])
        b, s = ids.shape
        what = msg(
            f"a batch of {b} sequences of {s} tokens in {c['n_micro']} micro-batches",
            f"{b} 条 {s} token 的序列、分成 {c['n_micro']} 个微批",
        )
        x = m.embed(ids)
        for layer in range(WORLD):
            x = m.layer(layer, x, torch.arange(s))
        y = values[WORLD - 1][c_i]["y"]
        if y is None or max_err(y, x) > 1e-4:
            nan = isinstance(y, torch.Tensor) and bool(torch.isnan(y).any())
            why = (
                msg(
                    " It contains NaN: a stage used its own copy of the input (only rank 0 has it) instead of receiving the previous stage's activations.",
                    " 其中有 NaN：某个阶段用了自己那份输入（只有 0 号进程有真实输入），而不是接收前一阶段的激活。",
                )
                if nan
                else ""
            )
            raise Failure(
                msg(
                    f"For {what}: the last stage's output is not the 4-layer forward (max error {max_err(y, x) if isinstance(y, torch.Tensor) else 'no tensor'}).{why}",
                    f"对于{what}：最后一个阶段的输出不等于 4 层前向（最大误差 {max_err(y, x) if isinstance(y, torch.Tensor) else '无张量'}）。{why}",
                ),
                [FIX],
            )
        seg = [segs[r][c_i] if c_i < len(segs[r]) else [] for r in range(WORLD)]
        charges = [[e for e in sg if e["ev"] == "charge"] for sg in seg]
        sizes = [t.shape[0] for t in torch.tensor_split(torch.empty(b), c["n_micro"])]
        n_got = [len(ch) for ch in charges]
        if any(n != c["n_micro"] for n in n_got):
            raise Failure(
                msg(
                    f"For {what}: stage calls per rank were {n_got}; each stage must run every micro-batch separately (split the batch with torch.tensor_split into n_micro micro-batches): one call for the whole batch is not micro-batched.",
                    f"对于{what}：各进程调用 stage 的次数为 {n_got}；每个阶段都要分别处理每个微批（用 torch.tensor_split 把批分成 n_micro 个微批）：整批调用一次就不是微批流水线。",
                ),
                [FIX],
            )
        for r in range(WORLD):
            recvs = sum(1 for e in seg[r] if e["ev"] == "enter" and e.get("op") == "recv")
            sends = sum(1 for e in seg[r] if e["ev"] == "enter" and e.get("op") == "send")
            want_r, want_s = (c["n_micro"] if r > 0 else 0), (c["n_micro"] if r < WORLD - 1 else 0)
            if recvs != want_r or sends != want_s:
                raise Failure(
                    msg(
                        f"For {what}: rank {r} made {recvs} dist.recv and {sends} dist.send calls; a stage receives each micro-batch from the previous stage "
                        f"and sends it on to the next with dist.recv / dist.send ({want_r} and {want_s} here): the emulated clock travels with them (isend / irecv carry no clock).",
                        f"对于{what}：第 {r} 号进程调用了 {recvs} 次 dist.recv 和 {sends} 次 dist.send；每个阶段要用 dist.recv 从前一阶段接收每个微批、用 dist.send 发给下一阶段"
                        f"（这里应为 {want_r} 次和 {want_s} 次）：仿真时钟随它们传递（isend / irecv 不带时钟）。",
                    ),
                    [FIX],
                )
        busy = sum(e["s"] for ch in charges for e in ch)
        ends = [max([e.get("clock", 0.0) for e in sg if "clock" in e] or [0.0]) for sg in seg]
        makespan = max(ends)
        bubble = 1 - busy / (WORLD * makespan)
        ideal = ideal_makespan(m, sizes, s)
        if makespan > ideal * (1 + 1e-6):
            raise Failure(
                msg(
                    f"For {what}: the pipeline took {makespan * 1e3:.1f} emulated ms, but stages that pass each micro-batch on as soon as it is computed finish in {ideal * 1e3:.1f} ms "
                    f"(bubble {bubble:.3f} instead of {1 - busy / (WORLD * ideal):.3f}): send each micro-batch to the next stage as soon as it is computed.",
                    f"对于{what}：流水线用了 {makespan * 1e3:.1f} 仿真毫秒，而每个微批算完就立刻传给下一阶段时只需 {ideal * 1e3:.1f} 毫秒"
                    f"（气泡 {bubble:.3f}，应为 {1 - busy / (WORLD * ideal):.3f}）：每个微批算完就立刻发给下一阶段。",
                ),
                [FIX],
            )
        for r in range(WORLD):
            rep = values[r][c_i]["bubble"]
            if not isinstance(rep, float | int) or abs(float(rep) - bubble) > 1e-6:
                formula = (WORLD - 1) / (c["n_micro"] + WORLD - 1)
                same = isinstance(rep, float | int) and abs(float(rep) - formula) < 1e-9
                why = msg(
                    f" That is the formula (p-1)/(m+p-1) = {formula:.4f}, which ignores the transfers between stages and uneven micro-batches: measure it on the clocks."
                    if same
                    else "",
                    f" 这是公式 (p-1)/(m+p-1) = {formula:.4f}，它忽略了阶段间的传输和不均匀的微批：要用时钟测量。"
                    if same
                    else "",
                )
                raise Failure(
                    msg(
                        f"For {what}: rank {r} reports a bubble of {rep}, the ranks' emulated clocks give {bubble:.6f} (1 - total stage time / (stages x makespan)).{why}",
                        f"对于{what}：第 {r} 号进程报告的气泡为 {rep}，各进程的仿真时钟给出 {bubble:.6f}（1 - 阶段总时间 / (阶段数 x 总时长)）。{why}",
                    ),
                    [FIX],
                )
        report.append(
            f"B={b} m={c['n_micro']}: {bubble:.3f} (GPipe formula {(WORLD - 1) / (c['n_micro'] + WORLD - 1):.3f})"
        )
    return msg(
        f"The 4-stage pipeline matches the single-process forward and runs as a pipeline; measured bubbles: {'; '.join(report)}.",
        f"4 阶段流水线与单进程前向一致，且确实按流水线执行；测得的气泡：{'；'.join(report)}。",
    ), {"bubble_m4": float(report and values[0][0]["bubble"])}


if __name__ == "__main__":
    main(check)
