"""Step 3: the MX scale rule matches CANN's DynamicMxQuant; the DiT is quantized A4W4 the way the
recipe does it (MXFP4 for attn.qkv and cross-attention, MXFP8 elsewhere); weight memory shrinks
and the clip stays close to the unquantized one and still shows the prompt."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import sanacheck as sc  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402

# against the unquantized clip of the checked prompt (seed 0): the recipe's A4W4 36.9 dB / cosine
# 0.9996, MXFP4 on every layer 30.6 dB / 0.9981. Over 8 prompts (bench/sanavideo.py): MXFP8
# 39.5 dB, A4W4 36.0 dB, MXFP4 everywhere 26.5 dB.
# Both clips are computed here, in one run, but the figure still depends on the CPU: a rounding
# difference flips MXFP4 codes of the activations and sampling carries it on, so another CPU
# behaves like another noise seed. The checked prompt, seed 0, with ATen's scalar / AVX2 /
# AVX512 kernels: A4W4 36.9 / 37.7 / 38.4 dB, MXFP4 everywhere 30.6 / 29.5 / 29.5 dB; seeds 0-11
# on the scalar and AVX512 kernels: A4W4 36.4-41.2 dB (cosine >= 0.99949), MXFP4 everywhere
# 27.9-32.8 dB (<= 0.99884). The thresholds sit in the gap, 2.4 dB (cosine 5e-4) below the worst
# correct clip seen.
MIN_PSNR = 34.0
SEEDS = tuple(range(12))  # the seeds the thresholds were set on
MIN_COSINE = 0.999
RULE_NAMES = {
    "log2": msg(
        "floor(torch.log2(amax)): log2 of a float rounds, and for an amax just under a power of two "
        "(one float32 ulp under 2^k, a block every press has) it gives k instead of k - 1, a scale twice "
        "too large. Read the exponent exactly: torch.frexp(amax) gives amax = m * 2^e with 0.5 <= m < 1, "
        "so floor(log2(amax)) = e - 1",
        "floor(torch.log2(amax))：浮点数的 log2 会舍入，amax 恰好比 2 的幂小一点时（比 2^k 小一个 float32 ulp，"
        "每次检查都有这样的块）它给出 k 而不是 k - 1，scale 大了一倍。请精确读取指数：torch.frexp(amax) 给出 "
        "amax = m * 2^e（0.5 <= m < 1），所以 floor(log2(amax)) = e - 1",
    ),
    "ceil": msg("ceil(log2(amax)) instead of floor", "用了 ceil(log2(amax)) 而不是 floor"),
    "amax/max": msg(
        "amax / element_max, which is not a power of two (E8M0 can only store 2^k)",
        "amax / element_max，它不是 2 的幂（E8M0 只能表示 2^k）",
    ),
    "no emax": msg("2^floor(log2(amax)) without subtracting emax", "2^floor(log2(amax))，没有减去 emax"),
}
ROUNDING_NAMES = {
    "round away": msg("rounds ties away from zero", "把恰在两格点正中的值往远离零的方向舍"),
    "round down": msg("rounds ties toward zero", "把恰在两格点正中的值往零的方向舍"),
    "round trunc": msg("truncates toward zero instead of rounding to nearest", "向零截断，而不是就近舍入"),
}
RULE_HINT = msg(
    "Per block of 32: shared_exp = floor(log2(amax)) - emax (E2M1: 2, E4M3: 8), scale = 2**shared_exp, "
    "then round x/scale onto the element grid (nearest, ties to even), saturating at 6 (FP4) or 448 (FP8).",
    "每 32 个元素一块：shared_exp = floor(log2(amax)) - emax（E2M1 为 2，E4M3 为 8），scale = 2**shared_exp，"
    "再把 x/scale 就近舍入到元素格点上（恰在两格点正中时取尾数为偶数的那个），FP4 饱和到 6，FP8 饱和到 448。",
)
TIE_HINT = msg(
    "A value exactly halfway between two grid points goes to the one with the even code: on E2M1 "
    "0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 2.5 -> 2, 5 -> 4. torch.round and labkit.mx.encode_e2m1 do that; "
    "nearest-by-argmin or floor(v + 0.5) do not.",
    "恰好落在两个格点正中的值，取编码为偶数的那个格点：E2M1 上 0.25 -> 0、0.75 -> 1、1.25 -> 1、2.5 -> 2、"
    "5 -> 4。torch.round 和 labkit.mx.encode_e2m1 就是这样舍入的；用 argmin 找最近点或 floor(v + 0.5) 则不是。",
)


def _examples(diff: dict) -> str:
    rows = [
        f"x={x:.6g}: x/scale={v:.6g}, you give {g:.6g}, DynamicMxQuant gives {r:.6g}"
        for x, v, g, r in diff["examples"]
    ]
    rows_zh = [
        f"x={x:.6g}：x/scale={v:.6g}，你的结果 {g:.6g}，DynamicMxQuant 的结果 {r:.6g}"
        for x, v, g, r in diff["examples"]
    ]
    return msg("\n" + "\n".join(rows), "\n" + "\n".join(rows_zh))


def check_rule(rule: dict) -> None:
    calls = rule.get("reference_calls") or {}
    if calls:
        names = ", ".join(sorted(calls))
        raise Failure(
            msg(
                f"mx_quantize_dequantize() calls {names}: that is labkit's own MX quantizer, the reference "
                "this check compares with. The step asks you to write the scale rule; from labkit.mx use only "
                "the E2M1 grid (encode_e2m1 / decode_e2m1).",
                f"mx_quantize_dequantize() 调用了 {names}：这是 labkit 自己的 MX 量化实现，也就是本检查用来比对的参考。"
                "这一步要求你自己写出 scale 规则；labkit.mx 中只可使用 E2M1 格点（encode_e2m1 / decode_e2m1）。",
            ),
            [RULE_HINT],
        )
    for fmt in ("mxfp4", "mxfp8"):
        if rule[fmt] == 0:
            bad16 = rule.get(f"{fmt}_bf16")
            if bad16 is None:
                continue
            raise Failure(
                msg(
                    f"mx_quantize_dequantize(x, {fmt!r}) is right on a float32 2-D input but not on a bf16 input "
                    f"of shape (2, 4, 128): "
                    + (
                        f"it returns {bad16[0]} of shape {tuple(bad16[1])}"
                        if bad16[0] != "values"
                        else f"values differ by up to {bad16[1]:.3g}"
                    )
                    + ". Activations arrive in bf16 with any number of leading dims; return x's shape and dtype.",
                    f"mx_quantize_dequantize(x, {fmt!r}) 对 float32 二维输入正确，对形状 (2, 4, 128) 的 bf16 输入却不对："
                    + (
                        f"返回的是形状 {tuple(bad16[1])} 的 {bad16[0]}"
                        if bad16[0] != "values"
                        else f"数值最多相差 {bad16[1]:.3g}"
                    )
                    + "。激活值以 bf16 传入，前面可以有任意多维；请返回与 x 相同的形状和 dtype。",
                )
            )
        diff = rule.get(f"{fmt}_diff")
        looks = rule.get(f"{fmt}_looks_like")
        if looks in ROUNDING_NAMES or (diff and diff["n"] and diff["ties"] == diff["n"]):
            how = ROUNDING_NAMES.get(looks, msg("rounds ties differently", "对恰在两格点正中的值舍入不对"))
            raise Failure(
                msg(
                    f"The scale is right, the rounding is not: mx_quantize_dequantize(x, {fmt!r}) {how}; "
                    f"{diff['ties'] if diff else '?'} of the {diff['n'] if diff else '?'} differing values are exact "
                    "ties (x/scale halfway between two grid points), and a tie goes to the even code.",
                    f"scale 是对的，舍入不对：mx_quantize_dequantize(x, {fmt!r}) {how}；"
                    f"不一致的 {diff['n'] if diff else '?'} 个值中有 {diff['ties'] if diff else '?'} 个恰好落在两个格点正中"
                    "（x/scale 是两个格点的中点），这样的值应取编码为偶数的格点。",
                )
                + (_examples(diff) if diff else ""),
                [TIE_HINT],
            )
        if diff and (diff["nan"] or diff["saturated"] == diff["n"]):
            top = 6 if fmt == "mxfp4" else 448
            raise Failure(
                msg(
                    f"mx_quantize_dequantize(x, {fmt!r}) does not saturate: {diff['nan']} NaN, "
                    f"{diff['saturated']} wrong values where x/scale is above {top}. With the floor rule x/scale can "
                    f"reach just under {2 * top if fmt == 'mxfp4' else 512}; clamp it to ±{top} before the cast "
                    "(float8_e4m3fn has no infinity: it turns overflow into NaN).",
                    f"mx_quantize_dequantize(x, {fmt!r}) 没有做饱和：有 {diff['nan']} 个 NaN，{diff['saturated']} 个"
                    f" x/scale 大于 {top} 的值不对。按 floor 规则 x/scale 最大可接近 {2 * top if fmt == 'mxfp4' else 512}；"
                    f"转换前请先钳位到 ±{top}（float8_e4m3fn 没有无穷大，溢出会变成 NaN）。",
                )
                + _examples(diff),
                [RULE_HINT],
            )
        why = (
            msg(f" Your scale looks like {RULE_NAMES[looks]}.", f" 你的 scale 看起来是 {RULE_NAMES[looks]}。")
            if looks in RULE_NAMES
            else ""
        )
        raise Failure(
            msg(
                f"mx_quantize_dequantize(x, {fmt!r}) does not follow the MX scale rule (max error {rule[fmt]:.3g}).",
                f"mx_quantize_dequantize(x, {fmt!r}) 不符合 MX 的 scale 规则（最大误差 {rule[fmt]:.3g}）。",
            )
            + why
            + (_examples(diff) if diff else ""),
            [RULE_HINT],
        )


def check_format_rule(format_rule: dict) -> None:
    for qt, wrong in format_rule.items():
        listing = ", ".join(f"{n}={f}" for n, f in sorted(wrong.items())[:4])
        raise Failure(
            msg(
                f"quant_format(name, {qt!r}) gives the wrong formats: {listing}. In {qt} "
                + {
                    "bf16": "nothing is quantized.",
                    "a8w8": "every quantized layer is MXFP8.",
                    "a4w4": "only attn.qkv and the cross-attention linears are MXFP4, the rest MXFP8.",
                }[qt],
                f"quant_format(name, {qt!r}) 给出的格式不对：{listing}。{qt} 模式下"
                + {
                    "bf16": "不量化任何层。",
                    "a8w8": "所有量化层都用 MXFP8。",
                    "a4w4": "只有 attn.qkv 和交叉注意力的线性层用 MXFP4，其余用 MXFP8。",
                }[qt],
            )
        )


def check() -> tuple[str, dict]:
    expect(
        Path("TinySana/tinysana/layers.py").is_file(),
        msg(
            "Do step 1 first: quant_module.py works on the TinySana/ tree that infer_platform.sh sets up.",
            "请先完成第 1 步：quant_module.py 作用于 infer_platform.sh 建立的 TinySana/ 源码目录。",
        ),
    )
    rng = sc.run_rng("a4w4")
    seed, case_seed = rng.choice(SEEDS), rng.randrange(2**31)
    res = sc.run_harness("quantize", "quant_module.py", sc.PROMPT, seed, ["a4w4"], case_seed)
    check_rule(res["rule"])
    run = res["runs"]["a4w4"]
    quality = msg(
        f"PSNR {run['psnr']:.1f} dB, cosine {run['cosine']:.4f} against the unquantized clip",
        f"相对未量化视频 PSNR {run['psnr']:.1f} dB，余弦相似度 {run['cosine']:.4f}",
    )
    formats = run["formats"]
    expect(
        any(f != "bf16" for f in formats.values()),
        msg(
            'replace_quant_module(dit, "a4w4") quantized no layer: quant_format() returns None for all of them.',
            'replace_quant_module(dit, "a4w4") 没有量化任何层：quant_format() 对所有层都返回 None。',
        ),
    )
    wrong = run["wrong_formats"]
    if wrong:
        n4 = sum(f == "mxfp4" for f in formats.values())
        listing = ", ".join(f"{n}={f}" for n, f in sorted(wrong.items())[:6])
        everywhere = n4 == len(formats)
        low = run["psnr"] < MIN_PSNR or run["cosine"] < MIN_COSINE
        raise Failure(
            (
                msg(
                    f"MXFP4 is applied to every quantized layer: {quality}"
                    + (f", below the {MIN_PSNR:g} dB the recipe keeps. " if low else ". "),
                    f"所有量化层都用了 MXFP4：{quality}"
                    + (f"，低于方案要求的 {MIN_PSNR:g} dB。" if low else "。"),
                )
                if everywhere
                else ""
            )
            + msg(f"Layers in the wrong format: {listing}.", f"格式不对的层：{listing}。"),
            [
                msg(
                    "In a4w4 the recipe puts only attn.qkv and the cross-attention's q_linear, kv_linear and proj in "
                    'MXFP4; attn.proj and the Mix-FFN\'s 1x1 convs fall back to MXFP8 ("部分回退a8w8").',
                    "a4w4 中方案只把 attn.qkv 以及交叉注意力的 q_linear、kv_linear、proj 设为 MXFP4；"
                    "attn.proj 和 Mix-FFN 的 1x1 卷积回退到 MXFP8（部分回退 a8w8）。",
                )
            ],
        )
    check_format_rule(res["format_rule"])
    expect(
        run["psnr"] >= MIN_PSNR and run["cosine"] >= MIN_COSINE,
        msg(
            f"The A4W4 clip is too far from the unquantized one: {quality} (need >= {MIN_PSNR:g} dB, >= {MIN_COSINE:g}).",
            f"A4W4 视频与未量化视频相差太大：{quality}（需要 >= {MIN_PSNR:g} dB，>= {MIN_COSINE:g}）。",
        ),
    )
    a = sc.analyse(run["frames"].numpy())
    wrong_prompt = sc.mismatch(a, sc.PROMPT)
    expect(
        wrong_prompt is None,
        msg(
            f"The A4W4 clip no longer shows the prompt: {wrong_prompt}.",
            f"A4W4 视频不再呈现提示词内容：{wrong_prompt}。",
        ),
    )
    before, after = run["dit_weight_bytes_bf16"], run["dit_weight_bytes"]
    return (
        msg(
            f"A4W4: DiT weights {before / 1024:.0f} KiB -> {after / 1024:.0f} KiB ({before / after:.2f}x smaller); "
            f"{quality} (seed {seed}); still {sc.describe(a)}.",
            f"A4W4：DiT 权重 {before / 1024:.0f} KiB -> {after / 1024:.0f} KiB（缩小 {before / after:.2f} 倍）；"
            f"{quality}（seed {seed}）；仍然是 {sc.describe(a)}。",
        ),
        {
            "psnr_db": run["psnr"],
            "cosine": run["cosine"],
            "dit_weight_kib_bf16": before / 1024,
            "dit_weight_kib_a4w4": after / 1024,
        },
    )


main(check)
