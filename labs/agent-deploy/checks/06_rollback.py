"""Step 6: agent/runner.py's try_skill keeps a skill only when it verifies and is faster; a
skill that breaks accuracy (or gains nothing) is rolled back, the model left exactly as it was,
and the decision says why with the figures."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import adref as ar  # noqa: E402
from labkit.check import expect, main, msg  # noqa: E402


def _why(d: dict) -> dict:
    w = d.get("why")
    return w if isinstance(w, dict) else {}


def check() -> tuple[str, dict]:
    ps = ar.prompts("rollback")
    n = ar.N_TOKENS
    res = ar.run_harness("h_rollback", "agent/runner.py", ps, n)

    # 1. the accuracy-breaking skill
    r = res["broken"]
    d = r["decision"]
    expect(
        r["model_state_after"] == r["model_state_before"] and not r["weights_replaced"],
        msg(
            "The rejected skill's change stays applied: the model passed to try_skill was modified "
            f"(e.g. {', '.join(r['weights_replaced']) or 'its op table or formats'}). Apply a skill to a copy "
            "(model.clone()) so that a rollback leaves the model as it was.",
            "被拒绝技能的改动仍然生效：传给 try_skill 的模型被修改了"
            f"（例如 {', '.join(r['weights_replaced']) or '算子表或格式'}）。把技能应用到副本（model.clone()）上，回滚时模型才保持原样。",
        ),
    )
    expect(
        d.get("decision") == "reject",
        msg(
            f"try_skill kept the W4A4-everywhere skill (decision {d.get('decision')!r}) although its logits fail the gate.",
            f"try_skill 保留了全 W4A4 技能（decision 为 {d.get('decision')!r}），尽管它的 logits 没有通过门限。",
        ),
    )
    expect(
        r["returned_state"] == r["model_state_before"],
        msg(
            "After a rejection try_skill returns a model with the change applied; it must return the model as it was before the skill.",
            "拒绝之后 try_skill 返回的模型带着改动；它应返回应用技能之前的模型。",
        ),
    )
    graph = ("fused_ops", "graph_mode")  # the broken skill is tried on the graph-mode model
    value = ar.ref_rel_rms(graph, (*graph, "quant_mxfp4_all"), ps, n)
    w = _why(d)
    expect(
        w.get("code") == "verification"
        and w.get("metric") == "logits_rel_rms"
        and isinstance(w.get("value"), (int, float))
        and ar.close(float(w["value"]), value, 1e-3)
        and w.get("tol") == 0.12,
        msg(
            f"The decision must say why: why = {{code: 'verification', metric: 'logits_rel_rms', value: {value:.4g}, tol: 0.12}} "
            f"(the failed check's own figures); it says {w or d.get('why')}.",
            f"决策必须说明原因：why = {{code: 'verification', metric: 'logits_rel_rms', value: {value:.4g}, tol: 0.12}}"
            f"（未通过的验证自己的数值）；现在是 {w or d.get('why')}。",
        ),
    )

    # 2. verifies but gains nothing
    s = res["slow"]
    d = s["decision"]
    b_ms = ar.ref_measure(("fused_ops",), ps, n)["ms_per_token"]
    a_ms = ar.ref_measure(("fused_ops", "eager_gating"), ps, n)["ms_per_token"]
    expect(
        d.get("decision") == "reject" and s["returned_state"] == s["model_state_before"],
        msg(
            f"A skill that verifies but makes decode slower ({b_ms:.4f} -> {a_ms:.4f} ms/token) was kept: a skill "
            "stays only when it is faster.",
            f"一个验证通过但让解码变慢（{b_ms:.4f} -> {a_ms:.4f} ms/token）的技能被保留了：只有更快的技能才能保留。",
        ),
    )
    w = _why(d)
    expect(
        w.get("code") == "no_gain"
        and isinstance(w.get("value"), (int, float))
        and ar.close(float(w["value"]), b_ms / a_ms, 1e-3),
        msg(
            f"The rejection of the slower skill must say why: why = {{code: 'no_gain', metric: 'speedup', value: {b_ms / a_ms:.4f}, ...}}; it says {w or d.get('why')}.",
            f"拒绝更慢的技能时必须说明原因：why = {{code: 'no_gain', metric: 'speedup', value: {b_ms / a_ms:.4f}, ...}}；现在是 {w or d.get('why')}。",
        ),
    )

    # 3. a good skill is kept
    g = res["good"]
    d = g["decision"]
    after = ar.ref_measure(("fused_ops", "graph_mode"), ps, n)["ms_per_token"]
    expect(
        d.get("decision") == "accept" and g["returned_state"]["graph"] is True,
        msg(
            f"try_skill rejected graph mode ({d.get('decision')!r}, {d.get('why')}), which verifies and is {b_ms / after:.2f}x faster.",
            f"try_skill 拒绝了图模式（{d.get('decision')!r}，{d.get('why')}），而它验证通过且快 {b_ms / after:.2f}x。",
        ),
    )
    sp = d.get("speedup")
    expect(
        isinstance(sp, (int, float)) and ar.close(float(sp), b_ms / after, 1e-3),
        msg(
            f"The decision claims a speed-up of {sp}; the figures give {b_ms:.4f} / {after:.4f} = {b_ms / after:.4f}.",
            f"决策声称加速 {sp}；数值给出 {b_ms:.4f} / {after:.4f} = {b_ms / after:.4f}。",
        ),
    )
    return (
        msg(
            f"Rollback works: W4A4-everywhere rejected (logits error {value:.3g} > 0.12) and the model untouched; "
            f"a slower skill ({b_ms / a_ms:.3f}x) rejected; graph mode kept ({b_ms / after:.2f}x).",
            f"回滚正确：全 W4A4 被拒绝（logits 误差 {value:.3g} > 0.12），模型保持原样；"
            f"更慢的技能（{b_ms / a_ms:.3f}x）被拒绝；图模式被保留（{b_ms / after:.2f}x）。",
        ),
        {"broken_rel_rms": value, "slow_speedup": b_ms / a_ms, "graph_speedup": b_ms / after},
    )


main(check)
