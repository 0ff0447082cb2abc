"""Step 3: skills/quant_mx.py quantises attention and shared experts W8A8 MXFP8 and routed
experts W4A8, behind a logits gate whose tolerance passes it and stops the all-MXFP4 skill."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import adref as ar  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402

WANT = {"attn": ["mxfp8_e4m3"], "shared": ["mxfp8_e4m3"], "expert": ["mxfp4"]}
KEEP = ("embed", "router", "lm_head", "norm", "mtp")


def check() -> tuple[str, dict]:
    ps = ar.prompts("quantize")
    n = ar.N_TOKENS
    ref = ("fused_ops", "graph_mode")
    seqs = [list(p) + t for p, t in zip(ps, ar.ref_tokens_all(ref, ps, n), strict=True)]
    res = ar.run_harness("h_quant", "skills/quant_mx.py", ps, n, seqs)
    spec = res["skill"].get("verify", {})
    expect(
        spec.get("kind") == "logits" and isinstance(spec.get("tol"), (int, float)),
        msg(
            f'Quantisation changes the numbers, so tokens may move: SKILL["verify"] should be a logits gate '
            f'{{"kind": "logits", "tol": <relative RMS error>}}, not {spec}.',
            f'量化会改变数值，token 可能随之变化：SKILL["verify"] 应是 logits 门限 {{"kind": "logits", "tol": <相对 RMS 误差>}}，而不是 {spec}。',
        ),
    )
    tol = float(spec["tol"])
    fmts, acts = res["state"]["formats"], res["state"]["act_fmt"]
    for g, want in WANT.items():
        expect(
            fmts.get(g) == want,
            msg(
                f"The {g} weights are {fmts.get(g) or 'not quantised'}; the 950 recipe puts them in {want[0]}.",
                f"{g} 权重为 {fmts.get(g) or '未量化'}；950 配方中它们是 {want[0]}。",
            ),
        )
        expect(
            acts.get(g) == "mxfp8_e4m3",
            msg(
                f"The {g} activations are {acts.get(g) or 'not quantised'}: W8A8 / W4A8 means MXFP8 (E4M3) activations (model.act_fmt).",
                f"{g} 的激活为 {acts.get(g) or '未量化'}：W8A8 / W4A8 意味着 MXFP8（E4M3）激活（model.act_fmt）。",
            ),
        )
    for g in KEEP:
        expect(
            not fmts.get(g),
            msg(
                f"The {g} weights are quantised ({fmts.get(g)}); the recipe keeps the {g} as it is (the LM head unquantised).",
                f"{g} 权重被量化了（{fmts.get(g)}）；配方让 {g} 保持原样（LM 头不量化）。",
            ),
        )
    num = den = 0.0
    for s, lc in zip(seqs, res["logits"], strict=True):
        la = ar.ref_teacher(ref, s)
        num += float((lc - la).pow(2).sum())
        den += float(la.pow(2).sum())
    value = math.sqrt(num / den)
    broken = ar.ref_rel_rms(ref, (*ref, "quant_mxfp4_all"), ps, n)
    good, bad = res["verify_good"], res["verify_broken"]
    at_tol = res.get("verify_at_tol")
    expect(
        isinstance(at_tol, dict) and at_tol.get("value") == 0 and at_tol.get("passed") is True,
        msg(
            f"verify() on a candidate identical to the reference with tol 0 says {at_tol}: the logits error is 0, and the "
            "gate passes when the error is at most tol (value <= tol).",
            f"对与参考完全相同的候选、tol 为 0 时，verify() 给出 {at_tol}：logits 误差为 0，"
            "门限的规则是误差不超过 tol 即通过（value <= tol）。",
        ),
    )
    expect(
        isinstance(good, dict)
        and isinstance(good.get("value"), (int, float))
        and ar.close(float(good["value"]), value, 1e-3),
        msg(
            f"verify() reports a logits error of {good.get('value') if isinstance(good, dict) else good} for your skill; "
            f"the checker recomputes {value:.4g} (relative RMS of candidate minus reference logits, teacher-forced on the reference's tokens).",
            f"verify() 给你的技能报告的 logits 误差为 {good.get('value') if isinstance(good, dict) else good}；"
            f"检查器重新计算为 {value:.4g}（候选与参考 logits 之差的相对 RMS，在参考模型的 token 上 teacher forcing）。",
        ),
    )
    expect(
        good.get("passed") is True,
        msg(
            f"Your gate rejects the correct quantisation: error {value:.4g} > tolerance {tol:g}.",
            f"你的门限拒绝了正确的量化：误差 {value:.4g} > 容差 {tol:g}。",
        ),
    )
    if not (isinstance(bad, dict) and bad.get("passed") is False):
        raise Failure(
            msg(
                f"The gate lets through the all-MXFP4 skill (W4A4 everywhere, LM head included): its logits error is "
                f"{broken:.4g}, your tolerance is {tol:g}. A gate this loose keeps a skill that breaks accuracy.",
                f"这个门限放过了全 MXFP4 技能（全部 W4A4，含 LM 头）：它的 logits 误差为 {broken:.4g}，你的容差为 {tol:g}。"
                "这么宽的门限会保留破坏精度的技能。",
            ),
            [
                msg(
                    f"Choose a tolerance between the correct skill's error ({value:.3g}) and the broken one's ({broken:.3g}).",
                    f"容差应取在正确技能的误差（{value:.3g}）和错误技能的误差（{broken:.3g}）之间。",
                )
            ],
        )
    exp_m = ar.ref_measure(ar.QUANT, ps, n)
    got_m = res["measure"]
    expect(
        got_m["weight_bytes"] == exp_m["weight_bytes"]
        and ar.close(got_m["ms_per_token"], exp_m["ms_per_token"]),
        msg(
            f"Weights {got_m['weight_bytes']} B and {got_m['ms_per_token']:.4f} ms/token; the recipe's formats give "
            f"{exp_m['weight_bytes']} B and {exp_m['ms_per_token']:.4f} ms/token.",
            f"权重 {got_m['weight_bytes']} B、{got_m['ms_per_token']:.4f} ms/token；配方的格式应为 "
            f"{exp_m['weight_bytes']} B、{exp_m['ms_per_token']:.4f} ms/token。",
        ),
    )
    before = ar.ref_measure(ref, ps, n)
    return (
        msg(
            f"Quantisation passes its gate (logits error {value:.3g} <= {tol:g}; all-MXFP4 {broken:.3g} is stopped): "
            f"weights {before['weight_bytes'] / 2**20:.2f} -> {got_m['weight_bytes'] / 2**20:.2f} MiB, "
            f"{before['ms_per_token']:.4f} -> {got_m['ms_per_token']:.4f} ms/token.",
            f"量化通过门限（logits 误差 {value:.3g} <= {tol:g}；全 MXFP4 的 {broken:.3g} 被拦下）："
            f"权重 {before['weight_bytes'] / 2**20:.2f} -> {got_m['weight_bytes'] / 2**20:.2f} MiB，"
            f"{before['ms_per_token']:.4f} -> {got_m['ms_per_token']:.4f} ms/token。",
        ),
        {
            "logits_rel_rms": value,
            "broken_rel_rms": broken,
            "tol": tol,
            "weight_bytes": got_m["weight_bytes"],
        },
    )


main(check)
