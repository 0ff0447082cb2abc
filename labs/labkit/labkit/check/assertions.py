"""Assertions whose failure messages a learner understands.

Each ``expect_*`` raises :class:`~labkit.check.Failure` (caught by :func:`~labkit.check.main`)
with a message naming the value, what was wrong and where, in the language of ``LAB_LANG``;
``hint`` is appended as a question ("did you ...?") and also becomes a hint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .verdict import Failure, msg

__all__ = ["expect", "expect_close", "expect_equal", "expect_file"]


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _hints(hint: str | Sequence[str]) -> list[str]:
    return (
        [hint]
        if isinstance(hint, str) and hint
        else [h for h in hint if h]
        if not isinstance(hint, str)
        else []
    )


def _fail(text: str, hint: str | Sequence[str]) -> Failure:
    hints = _hints(hint)
    if hints:
        text = f"{text}; {hints[0]}"
    return Failure(text, hints)


def expect(cond: object, message: str, hints: Sequence[str] | str = ()) -> None:
    """Fail with ``message`` (and ``hints``) unless ``cond`` is true."""
    if not cond:
        raise Failure(message, hints)


def _to_tensor(name: str, value: Any, what: str) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if value is None:
        raise Failure(
            msg(
                f"`{name}` is None: {what} returned nothing (is a `return` missing?)",
                f"`{name}` 是 None：{what}没有返回值（是否缺少 `return`？）",
            )
        )
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise Failure(
            msg(
                f"`{name}` should be a tensor, got {type(value).__name__}",
                f"`{name}` 应该是张量，实际是 {type(value).__name__}",
            )
        ) from None


def _pos(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in index) + (",)" if len(index) == 1 else ")")


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def _check_layout(name: str, a: Any, e: Any, check_dtype: bool, hint: str | Sequence[str]) -> None:
    if tuple(a.shape) != tuple(e.shape):
        text = msg(
            f"`{name}` has shape {tuple(a.shape)} but the reference has shape {tuple(e.shape)}",
            f"`{name}` 的形状是 {tuple(a.shape)}，参考结果的形状是 {tuple(e.shape)}",
        )
        if a.numel() == e.numel() and a.numel() > 0:
            if sorted(a.shape) == sorted(e.shape):
                text += msg(
                    " (same sizes in another order: a transpose or permute is missing or extra)",
                    "（维度相同但顺序不同：是否少了或多了一次 transpose/permute？）",
                )
            else:
                text += msg(
                    " (same number of elements: a reshape/view is missing or wrong)",
                    "（元素个数相同：reshape/view 是否缺失或有误？）",
                )
        raise _fail(text, hint)
    if check_dtype and a.dtype != e.dtype:
        raise _fail(
            msg(
                f"`{name}` has dtype {a.dtype} but the reference has dtype {e.dtype} (a missing or extra .to(...)?)",
                f"`{name}` 的数据类型是 {a.dtype}，参考结果是 {e.dtype}（是否少了或多了 .to(...)？）",
            ),
            hint,
        )


def expect_close(
    name: str,
    actual: Any,
    expected: Any,
    *,
    atol: float,
    rtol: float = 0.0,
    hint: str | Sequence[str] = "",
    check_dtype: bool = True,
    what: str = "your code",
) -> float:
    """Fail unless ``|actual - expected| <= atol + rtol * |expected|`` everywhere (as
    ``torch.allclose``; NaN only matches NaN). Shape and dtype are checked first and explained.
    Returns the max abs error (a handy metric).

    Message example: "`attention_out` differs from the reference at position (0, 17): got 0.52,
    expected 0.21; max abs error 0.31 > tolerance 0.001 (atol 0.001, rtol 0); 37 of 4096 elements
    are out of tolerance; did you apply the causal mask before softmax?"
    """
    import torch

    a = _to_tensor(name, actual, what)
    e = _to_tensor(f"{name} (reference)", expected, "the reference")
    _check_layout(name, a, e, check_dtype, hint)
    if a.numel() == 0:
        return 0.0
    if a.is_complex() or e.is_complex():
        a64, e64 = a.to(torch.complex128), e.to(torch.complex128)
    else:
        a64, e64 = a.to(torch.float64), e.to(torch.float64)
    a_nan, e_nan = torch.isnan(a64), torch.isnan(e64)
    nan_bad = a_nan != e_nan
    if bool(nan_bad.any()):
        idx = _unravel(int(nan_bad.flatten().nonzero()[0]), a.shape)
        if bool(a_nan[idx]):
            text = msg(
                f"`{name}` contains NaN at position {_pos(idx)} ({int(a_nan.sum())} NaN in total) where the reference is {_fmt(float(e64[idx].real))}",
                f"`{name}` 在位置 {_pos(idx)} 是 NaN（共 {int(a_nan.sum())} 个 NaN），参考值为 {_fmt(float(e64[idx].real))}",
            )
        else:
            text = msg(
                f"`{name}` is {_fmt(float(a64[idx].real))} at position {_pos(idx)} where the reference is NaN",
                f"`{name}` 在位置 {_pos(idx)} 是 {_fmt(float(a64[idx].real))}，参考值为 NaN",
            )
        raise _fail(text, hint)
    both = ~(a_nan | e_nan)
    inf_same = torch.isinf(a64) & torch.isinf(e64) & (a64 == e64)
    err = torch.where(both & ~inf_same, (a64 - e64).abs(), torch.zeros((), dtype=torch.float64))
    err = torch.nan_to_num(err.real if err.is_complex() else err, nan=float("inf"), posinf=float("inf"))
    tol = atol + rtol * e64.abs().real
    over = err > tol
    max_err = float(err.max())
    if bool(over.any()):
        flat = int(torch.where(over, err, torch.full_like(err, -1.0)).flatten().argmax())
        idx = _unravel(flat, a.shape)
        n_bad, n = int(over.sum()), a.numel()
        got, want = float(a64[idx].real), float(e64[idx].real)
        text = msg(
            f"`{name}` differs from the reference at position {_pos(idx)}: got {_fmt(got)}, expected {_fmt(want)}; "
            f"max abs error {_fmt(max_err)} > tolerance {_fmt(float(tol[idx]))} (atol {atol:g}, rtol {rtol:g}); "
            f"{n_bad} of {n} elements are out of tolerance",
            f"`{name}` 在位置 {_pos(idx)} 与参考结果不同：得到 {_fmt(got)}，应为 {_fmt(want)}；"
            f"最大绝对误差 {_fmt(max_err)} > 容差 {_fmt(float(tol[idx]))}（atol {atol:g}, rtol {rtol:g}）；"
            f"{n} 个元素中有 {n_bad} 个超出容差",
        )
        raise _fail(text, hint)
    return max_err


def expect_equal(name: str, actual: Any, expected: Any, *, hint: str | Sequence[str] = "") -> None:
    """Fail unless ``actual == expected``: tensors must match in shape, dtype and every element
    (the first differing position is named); other values compare with ``==``."""
    import torch

    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        a = _to_tensor(name, actual, "your code")
        e = _to_tensor(f"{name} (reference)", expected, "the reference")
        _check_layout(name, a, e, True, hint)
        diff = (a != e) & ~(a.is_floating_point() and torch.isnan(a) & torch.isnan(e))
        if bool(diff.any()):
            idx = _unravel(int(diff.flatten().nonzero()[0]), a.shape)
            n_bad = int(diff.sum())
            raise _fail(
                msg(
                    f"`{name}` differs from the reference at position {_pos(idx)}: got {a[idx].item()!r}, "
                    f"expected {e[idx].item()!r} ({n_bad} of {a.numel()} elements differ)",
                    f"`{name}` 在位置 {_pos(idx)} 与参考结果不同：得到 {a[idx].item()!r}，应为 {e[idx].item()!r}"
                    f"（{a.numel()} 个元素中有 {n_bad} 个不同）",
                ),
                hint,
            )
        return
    if actual != expected:
        raise _fail(
            msg(
                f"`{name}` is {actual!r}, expected {expected!r}", f"`{name}` 是 {actual!r}，应为 {expected!r}"
            ),
            hint,
        )


def expect_file(
    path: str | os.PathLike[str], content: str | bytes | None = None, *, hint: str | Sequence[str] = ""
) -> Path:
    """Fail unless ``path`` (relative to the lab folder) is a file and, when ``content`` is
    given, holds exactly that text or bytes. Returns the path."""
    p = Path(path)
    if not p.exists():
        raise _fail(msg(f"`{p}` does not exist in your lab folder", f"你的实验文件夹中没有 `{p}`"), hint)
    if not p.is_file():
        raise _fail(msg(f"`{p}` is not a regular file", f"`{p}` 不是普通文件"), hint)
    if content is not None:
        data = p.read_bytes()
        want = content.encode() if isinstance(content, str) else content
        if data != want:
            if isinstance(content, str):
                got_text = data.decode("utf-8", errors="replace")
                lines_got, lines_want = got_text.splitlines(), content.splitlines()
                line = next(
                    (i for i, (g, w) in enumerate(zip(lines_got, lines_want, strict=False)) if g != w),
                    min(len(lines_got), len(lines_want)),
                )
                raise _fail(
                    msg(
                        f"`{p}` does not have the expected content (first difference on line {line + 1})",
                        f"`{p}` 的内容不符合要求（第 {line + 1} 行开始不同）",
                    ),
                    hint,
                )
            raise _fail(msg(f"`{p}` does not have the expected content", f"`{p}` 的内容不符合要求"), hint)
    return p
