"""Step 1: agent/measure.py measures steady-state decode and profiles where a token's time goes;
every figure equals the checker's own, on prompts from the run id and on a graph-mode model."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import adref as ar  # noqa: E402
from labkit.check import Failure, expect, main, msg, run_function  # noqa: E402

# the MTP model decodes a varying number of tokens per step: its launches per token are fractional
CASES = {
    "baseline": (),
    "graph": ("fused_ops", "graph_mode"),
    "mtp": ("fused_ops", "graph_mode", "quant_mx", "mtp"),
}


def check() -> tuple[str, dict]:
    ps = ar.prompts("profile")
    n = ar.N_TOKENS
    metrics: dict[str, float] = {}
    # both cases in one child; when the attendee's code raises, each case again in its own child
    # as it is judged, so the first failure reported is the same as with one child per case
    res = run_function(ar.HARNESS, "h_profile_each", list(CASES), ps, n, timeout=240, memory_mb=3072)
    batch = (
        res.value
        if res.error is None and isinstance(res.value, list) and len(res.value) == len(CASES)
        else None
    )
    for i, (case, chain) in enumerate(CASES.items()):
        got = batch[i] if batch is not None else ar.run_harness("h_profile", "agent/measure.py", case, ps, n)
        exp = ar.ref_measure(chain, ps, n)
        expect(
            isinstance(got, dict) and all(k in got for k in exp),
            msg(
                f"profile() must return a dict with {', '.join(sorted(exp))}; it returned {str(got)[:200]}.",
                f"profile() 必须返回包含 {', '.join(sorted(exp))} 的 dict；它返回了 {str(got)[:200]}。",
            ),
        )
        label = {
            "baseline": msg("the eager baseline", "eager 基线"),
            "graph": msg("a graph-mode model (the checker's own)", "图模式模型（检查器自己构建的）"),
            "mtp": msg(
                "a graph-mode, quantised model with MTP speculation (the checker's own)",
                "带 MTP 投机解码的图模式量化模型（检查器自己构建的）",
            ),
        }[case]
        ms, ems = float(got["ms_per_token"]), exp["ms_per_token"]
        if not ar.close(ms, ems):
            why = msg(
                "Use the emulated time of an emu.session (never wall time), over every prompt, divided by the decoded tokens.",
                "使用 emu.session 的仿真时间（不要用墙钟时间），覆盖所有提示词，再除以解码出的 token 数。",
            )
            if case == "graph" and ms > ems * 1.01:
                why = msg(
                    "It includes the one-time graph capture and compile: warm up on the same model first (not a "
                    "clone: a clone has its own compile cache), then measure.",
                    "这个数包含了一次性的图捕获与编译：先在同一个模型上预热（不要用 clone：clone 有自己的编译缓存），再测量。",
                )
            elif ar.close(ms, ems * (n - 1) / n, 1e-3):
                why = msg(
                    f"You divided by {n} tokens: the first token comes from prefill, which is not charged, so a run decodes {n - 1}.",
                    f"你除以了 {n} 个 token：第一个 token 来自不计费的预填充，一次运行只解码 {n - 1} 个。",
                )
            raise Failure(
                msg(
                    f"ms_per_token for {label} is {ms:.5f}, the checker measures {ems:.5f} ms (emulated, steady state). ",
                    f"{label}的 ms_per_token 为 {ms:.5f}，检查器测得 {ems:.5f} ms（仿真、稳态）。",
                )
                + why
            )
        for key, what in (
            ("launches_per_token", msg("launches per token", "每 token 算子下发次数")),
            ("weight_bytes", msg("weight bytes", "权重字节数")),
            ("launch_ms", msg("launch time per token", "每 token 下发时间")),
            ("compute_ms", msg("compute time per token", "每 token 计算时间")),
            ("memory_ms", msg("memory time per token", "每 token 访存时间")),
        ):
            if not ar.close(float(got[key]), float(exp[key])):
                hint = {
                    "launch_ms": msg(
                        "Launches times the per-launch overhead of the mode the model runs in: launch_overhead "
                        "eager, graph_launch_overhead in graph mode.",
                        "下发次数乘以模型所处模式的单次下发开销：eager 用 launch_overhead，图模式用 graph_launch_overhead。",
                    ),
                    "compute_ms": msg(
                        "All FLOPs of a token over the fp16 peak times the session scale.",
                        "每 token 的全部 FLOPs 除以 fp16 峰值乘以会话缩放系数。",
                    ),
                    "memory_ms": msg(
                        "All bytes of a token (every op, not only the weights) over the HBM bandwidth times the scale.",
                        "每 token 的全部字节（所有算子，不只是权重）除以 HBM 带宽乘以缩放系数。",
                    ),
                }.get(key, msg("Recompute it from the emulation report.", "请根据仿真报告重新计算。"))
                raise Failure(
                    msg(
                        f"{key} ({what}) for {label} is {got[key]}, the checker computes {exp[key]:.6g}.",
                        f"{label}的 {key}（{what}）为 {got[key]}，检查器算得 {exp[key]:.6g}。",
                    ),
                    [hint],
                )
        expect(
            got.get("bound") == exp["bound"],
            msg(
                f"bound for {label} is {got.get('bound')!r}; the largest of launch/compute/memory is {exp['bound']!r}.",
                f"{label}的 bound 为 {got.get('bound')!r}；launch/compute/memory 中最大的是 {exp['bound']!r}。",
            ),
        )
        ops = got.get("ops") if isinstance(got.get("ops"), dict) else {}
        op_launches = sum(float(o.get("launches", 0)) for o in ops.values() if isinstance(o, dict))
        expect(
            ar.close(op_launches, float(exp["launches_per_token"])),
            msg(
                f"The per-op launches of {label} add up to {op_launches:.4g} per token, but launches_per_token is "
                f"{exp['launches_per_token']:.4g}: every op's figures must be summed over all prompts, then divided "
                "by the decoded tokens.",
                f"{label}的各算子下发次数加起来是每 token {op_launches:.4g} 次，而 launches_per_token 为 "
                f"{exp['launches_per_token']:.4g}：每个算子的数值都要在所有提示词上累加，再除以解码出的 token 数。",
            ),
        )
        by_time = sorted(
            ((k, float(o["time_ms"])) for k, o in ops.items() if isinstance(o, dict) and "time_ms" in o),
            key=lambda kv: -kv[1],
        )
        want_top = [k for k, _ in by_time[:5]]
        top = got.get("top_ops")
        got_top = (
            [t[0] for t in top]
            if isinstance(top, (list, tuple)) and all(isinstance(t, (list, tuple)) and t for t in top)
            else top
        )
        expect(
            got_top == want_top,
            msg(
                f"top_ops for {label} is {str(got_top)[:200]}; the five op kinds with the most time per token are "
                f"{want_top}, largest first (as (name, ms) pairs).",
                f"{label}的 top_ops 为 {str(got_top)[:200]}；每 token 耗时最多的五类算子依次为 {want_top}"
                "（从大到小，(名称, ms) 对）。",
            ),
        )
        metrics[f"{case}_ms_per_token"] = ems
        metrics[f"{case}_launch_share"] = exp["launch_ms"] / ems
    return (
        msg(
            f"Profile matches: eager baseline {metrics['baseline_ms_per_token']:.4f} ms/token, "
            f"{metrics['baseline_launch_share']:.0%} of it launch overhead (launch-bound).",
            f"性能剖析正确：eager 基线 {metrics['baseline_ms_per_token']:.4f} ms/token，其中 "
            f"{metrics['baseline_launch_share']:.0%} 是算子下发开销（下发受限）。",
        ),
        metrics,
    )


main(check)
