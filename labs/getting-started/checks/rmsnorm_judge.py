"""Step 4's inputs and verdict, shared by the checker and tests/labs/test_getting_started.py.

The cases are drawn at check time from a seed (the checker derives it from ``LAB_RUN_ID``), plus
fixed cases on every boundary the step states: a 3-D and a 1-D ``x`` (the mean is over the *last*
dimension), a large ``eps`` on small-norm inputs and an all-zero row (``eps`` inside the square
root), bf16 and fp16 inputs (compute in fp32, cast ``y`` back once, ``rstd`` stays fp32; fp16
values whose squares overflow fp16). The verdict compares with a float64 reference and, when the
answer is wrong, names the mistake by matching it against the usual wrong formulas."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from labkit.check import msg

LOW = (torch.bfloat16, torch.float16)
MANTISSA = {torch.bfloat16: 7, torch.float16: 10}
# fp32 path vs the float64 reference: a mean of <= 256 squares and one rsqrt are a few fp32 ulps
# (~1e-6 relative); every wrong formula below is off by more than 1e-2 on some case.
RTOL, ATOL = 1e-5, 1e-6
# bf16/fp16: computing in fp32 and casting once matches the float64 result rounded to the dtype in
# all but a few elements (a fp32 value within 2**-16 of a rounding tie); casting before the weight
# multiply differs in ~25 % of elements, computing in bf16 in ~40 % with up to 3 ulps.
MAX_MEAN_ULPS = 0.05


@dataclass
class Case:
    label: str  # in the attendee's terms: shape, dtype, eps
    x: torch.Tensor
    w: torch.Tensor
    eps: float

    def payload(self) -> dict[str, Any]:
        return {"x": self.x, "w": self.w, "eps": self.eps}


def _label(x: torch.Tensor, eps: float, extra: tuple[str, str] = ("", "")) -> str:
    dtype = str(x.dtype).replace("torch.", "")
    return msg(
        f"x of shape {tuple(x.shape)} {dtype}, eps={eps:g}{extra[0]}",
        f"形状为 {tuple(x.shape)} 的 {dtype} 输入 x，eps={eps:g}{extra[1]}",
    )


def make_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def dim() -> int:
        return int(torch.randint(48, 200, (1,), generator=g))

    def weight(n: int) -> torch.Tensor:
        return torch.rand(n, generator=g) + 0.5

    cases: list[Case] = []
    d = dim()
    rows = int(torch.randint(3, 9, (1,), generator=g))
    x = torch.randn(rows, d, generator=g) * 3
    cases.append(Case(_label(x, 1e-6), x, weight(d), 1e-6))
    d = dim()
    eps = [1e-5, 1e-6][
        int(torch.randint(0, 2, (1,), generator=g))
    ]  # too small to tell eps mistakes apart: case 4 does
    x = torch.randn(2, 3, d, generator=g) * 2
    cases.append(Case(_label(x, eps), x, weight(d), eps))
    d = dim()
    x = torch.randn(d, generator=g)
    cases.append(Case(_label(x, 1e-5), x, weight(d), 1e-5))
    d = dim()
    x = torch.randn(5, d, generator=g) * 0.05
    cases.append(
        Case(_label(x, 0.5, (" (small values, large eps)", "（数值很小、eps 很大）")), x, weight(d), 0.5)
    )
    d = dim()
    x = torch.randn(3, d, generator=g)
    x[1] = 0.0
    cases.append(Case(_label(x, 1e-2, (" (row 1 all zeros)", "（第 1 行全为 0）")), x, weight(d), 1e-2))
    d = dim()
    x = (torch.randn(16, d, generator=g) * 3).to(torch.bfloat16)
    cases.append(Case(_label(x, 1e-6), x, weight(d).to(torch.bfloat16), 1e-6))
    d = dim()
    x = (torch.randn(4, d, generator=g) * 150).clamp(-6e4, 6e4).to(torch.float16)
    cases.append(
        Case(
            _label(x, 1e-6, (" (values up to ~500)", "（数值可达约 500）")),
            x,
            weight(d).to(torch.float16),
            1e-6,
        )
    )
    return cases


def _rstd(x: torch.Tensor, eps: float, *, sumsq: bool = False, outside: bool = False) -> torch.Tensor:
    xd = x.double()
    m = (xd**2).sum(-1, keepdim=True) if sumsq else (xd**2).mean(-1, keepdim=True)
    return 1.0 / (m.sqrt() + eps) if outside else 1.0 / (m + eps).sqrt()


def reference(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) in float64: rstd = 1/sqrt(mean(x², last dim) + eps), y = x * rstd * w."""
    rstd = _rstd(case.x, case.eps)
    return case.x.double() * rstd * case.w.double(), rstd


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = RTOL, atol: float = ATOL) -> bool:
    return a.shape == b.shape and bool(torch.isclose(a.double(), b.double(), rtol=rtol, atol=atol).all())


def _diagnose_rstd(case: Case, got: torch.Tensor) -> str:
    """What wrong formula ``got`` matches, in the attendee's terms ("" when none)."""
    ref = _rstd(case.x, case.eps)
    candidates = [
        (
            1.0 / ref,
            msg(
                "you return the RMS itself, sqrt(mean(x²) + eps); rstd is its reciprocal, 1 / sqrt(...)",
                "你返回的是 RMS 本身 sqrt(mean(x²) + eps)；rstd 是它的倒数 1 / sqrt(...)",
            ),
        ),
        (
            _rstd(case.x, case.eps, outside=True),
            msg(
                "eps is added after the square root, 1 / (sqrt(mean(x²)) + eps); it goes inside: 1 / sqrt(mean(x²) + eps)",
                "eps 加在了开方之后 1 / (sqrt(mean(x²)) + eps)；它应在根号里：1 / sqrt(mean(x²) + eps)",
            ),
        ),
        (
            _rstd(case.x, 0.0),
            msg(
                f"the eps you were given ({case.eps:g}) is not used: your rstd is 1 / sqrt(mean(x²))",
                f"没有用到传入的 eps（{case.eps:g}）：你的 rstd 是 1 / sqrt(mean(x²))",
            ),
        ),
        (
            _rstd(case.x, 1e-6),
            msg(
                f"your rstd uses eps = 1e-6 whatever eps is passed (here {case.eps:g}): use the eps argument",
                f"无论传入什么 eps（这里是 {case.eps:g}），你的 rstd 都用的是 1e-6：请使用参数 eps",
            ),
        ),
        (
            _rstd(case.x, case.eps, sumsq=True),
            msg(
                "you sum x² instead of taking its mean over the last dimension",
                "你对 x² 求的是和而不是最后一维上的均值",
            ),
        ),
        (
            1.0 / ((case.x.double() ** 2).mean(-1, keepdim=True) + case.eps),
            msg(
                "the square root is missing: rstd = 1 / sqrt(mean(x²) + eps)",
                "少了开方：rstd = 1 / sqrt(mean(x²) + eps)",
            ),
        ),
    ]
    for value, why in candidates:
        if not _close(value, ref, rtol=1e-2, atol=0) and _close(got, value, rtol=1e-3, atol=1e-6):
            return why
    return ""


def _ulps(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    tiny = torch.finfo(dtype).tiny
    w = want.double()
    exp = torch.floor(torch.log2(w.abs().clamp_min(tiny)))
    return (got.double() - w).abs() / torch.pow(2.0, exp - MANTISSA[dtype])


def _fmt(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def judge_one(case: Case, result: dict[str, Any]) -> tuple[str, float]:
    """("" or the failure message, max abs error of y) for one case."""
    x = case.x
    where = msg(f"For {case.label}: ", f"对于 {case.label}：")
    if "error" in result:
        extra = f" ({result['where']})" if result.get("where") else ""
        return where + msg(
            f"rms_norm raised {result['error']}{extra}.",
            f"rms_norm 抛出了 {result['error']}{extra}。",
        ), math.inf
    if "value" in result:
        return where + msg(
            f"rms_norm must return a tuple (y, rstd) of two tensors, like npu_rms_norm; it returned {result['value']}.",
            f"rms_norm 必须像 npu_rms_norm 一样返回两个张量组成的元组 (y, rstd)；实际返回的是 {result['value']}。",
        ), math.inf
    y, rstd = result["y"], result["rstd"]
    y_ref, rstd_ref = reference(case)
    want_shape = tuple(x.shape[:-1]) + (1,)
    if tuple(rstd.shape) != want_shape:
        if tuple(rstd.shape) == tuple(x.shape[:-1]):
            why = msg(
                "the last dimension was dropped: keep it with size 1 (keepdim=True), as npu_rms_norm does",
                "最后一维被去掉了：像 npu_rms_norm 一样保留它，大小为 1（keepdim=True）",
            )
        else:
            why = msg(
                "the mean must be taken over the last dimension (dim=-1) only, keeping it with size 1",
                "均值只能在最后一维（dim=-1）上计算，并保留这一维（大小为 1）",
            )
        return where + msg(
            f"rstd has shape {_fmt(rstd)}, expected {want_shape}: {why}.",
            f"rstd 的形状是 {_fmt(rstd)}，应为 {want_shape}：{why}。",
        ), math.inf
    if tuple(y.shape) != tuple(x.shape):
        return where + msg(
            f"y has shape {_fmt(y)}, expected the shape of x {tuple(x.shape)}.",
            f"y 的形状是 {_fmt(y)}，应与 x 相同 {tuple(x.shape)}。",
        ), math.inf
    low = x.dtype in LOW
    name = str(x.dtype).replace("torch.", "")
    if low and not (
        torch.isfinite(y.double()).all() and torch.isfinite(rstd.double()).all() and (rstd.double() > 0).all()
    ):
        return where + msg(
            f"y or rstd is inf, nan or 0: x² of values this large overflows {name} (max {torch.finfo(x.dtype).max:g}). "
            "Compute in fp32 (x.float()) and cast y back to x's dtype at the end, as the fused kernel does.",
            f"y 或 rstd 出现了 inf、nan 或 0：这么大的值平方后超出了 {name} 的范围（最大 {torch.finfo(x.dtype).max:g}）。"
            "请像融合算子那样用 fp32 计算（x.float()），最后再把 y 转回 x 的数据类型。",
        ), math.inf
    if low:
        if y.dtype != x.dtype:
            return where + msg(
                f"y is {str(y.dtype).replace('torch.', '')}; it must come back in x's dtype ({name}): cast it back once, at the end.",
                f"y 的数据类型是 {str(y.dtype).replace('torch.', '')}；它应与 x 相同（{name}）：在最后转换一次。",
            ), math.inf
        ulps = _ulps(y, y_ref.to(x.dtype), x.dtype)
        if ulps.mean().item() > MAX_MEAN_ULPS or ulps.max().item() > 1:
            return where + msg(
                f"y is off by up to {ulps.max().item():.0f} {name} rounding steps from the exact result rounded once "
                f"({(ulps > 0).double().mean().item():.0%} of the elements differ): part of the computation runs in "
                f"{name}. Compute x², the mean, rstd and the weight multiply in fp32 (x.float(), weight.float()) "
                f"and cast y to {name} once, at the end, as npu_rms_norm does.",
                f"y 与只舍入一次的精确结果最多相差 {ulps.max().item():.0f} 个 {name} 舍入单位"
                f"（{(ulps > 0).double().mean().item():.0%} 的元素不同）：有一部分计算是在 {name} 下做的。"
                f"请像 npu_rms_norm 一样，x²、均值、rstd 和乘以 weight 都用 fp32（x.float()、weight.float()），"
                f"最后把 y 一次性转回 {name}。",
            ), math.inf
        if rstd.dtype != torch.float32:
            return where + msg(
                f"rstd is {str(rstd.dtype).replace('torch.', '')}; npu_rms_norm returns rstd in float32 whatever the dtype of x.",
                f"rstd 的数据类型是 {str(rstd.dtype).replace('torch.', '')}；无论 x 是什么类型，npu_rms_norm 返回的 rstd 都是 float32。",
            ), math.inf
    if not _close(rstd, rstd_ref, rtol=RTOL, atol=0):
        why = _diagnose_rstd(case, rstd)
        rel = ((rstd.double() - rstd_ref).abs() / rstd_ref.abs()).nan_to_num(math.inf)
        i = int(rel.flatten().argmax())
        detail = msg(
            f"rstd[{i}] is {rstd.flatten()[i].item():.6g}, expected 1 / sqrt(mean(x²) + eps) = {rstd_ref.flatten()[i].item():.6g}",
            f"rstd[{i}] 是 {rstd.flatten()[i].item():.6g}，应为 1 / sqrt(mean(x²) + eps) = {rstd_ref.flatten()[i].item():.6g}",
        )
        return where + (f"{why}; {detail}." if why else f"{detail}."), math.inf
    if low:
        return "", float((y.double() - y_ref).abs().max())
    scale = float(y_ref.abs().max()) or 1.0
    if not _close(y, y_ref, rtol=RTOL, atol=ATOL * scale):
        if _close(y, x.double() * rstd_ref, rtol=1e-4, atol=1e-6 * scale):
            why = msg(
                "the weight is not applied: y = x * rstd * weight", "没有乘以 weight：y = x * rstd * weight"
            )
        else:
            why = msg("y = x * rstd * weight", "y = x * rstd * weight")
        err = float((y.double() - y_ref).abs().max())
        return where + msg(
            f"rstd is right but y is off by up to {err:.3g}: {why}.",
            f"rstd 正确，但 y 最多相差 {err:.3g}：{why}。",
        ), math.inf
    return "", float((y.double() - y_ref).abs().max())


DELEGATE_MESSAGE = (
    "your rms_norm calls {names}: the step asks you to write RMSNorm yourself from tensor operations "
    "(that is the plain version the fused op is checked against), not to call a library RMSNorm.",
    "你的 rms_norm 调用了 {names}：这一步要求你用张量运算自己写出 RMSNorm（融合算子要对齐的就是这个朴素版本），"
    "而不是调用现成的 RMSNorm。",
)


def judge(cases: list[Case], outcome: dict[str, Any]) -> tuple[str, float]:
    """("" or the first failure message, the worst abs error of y over every case)."""
    if outcome.get("delegated"):
        names = ", ".join(outcome["delegated"])
        return msg(DELEGATE_MESSAGE[0].format(names=names), DELEGATE_MESSAGE[1].format(names=names)), math.inf
    worst = 0.0
    for case, result in zip(cases, outcome["results"], strict=True):
        problem, err = judge_one(case, result)
        if problem:
            return problem, err
        worst = max(worst, err)
    return "", worst
