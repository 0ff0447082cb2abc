"""Friendly assertions: the messages a learner reads."""

from __future__ import annotations

import pytest
import torch
from labkit.check import Failure, expect, expect_close, expect_equal, expect_file, msg


def _message(fn, *args, **kwargs) -> Failure:
    with pytest.raises(Failure) as info:
        fn(*args, **kwargs)
    return info.value


def test_msg_follows_lab_lang(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "zh")
    assert msg("yes", "是") == "是"
    monkeypatch.setenv("LAB_LANG", "en")
    assert msg("yes", "是") == "yes"
    monkeypatch.delenv("LAB_LANG")
    assert msg("yes", "是") == "yes"


def test_expect_close_names_the_worst_position(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    ref = torch.zeros(2, 32)
    out = ref.clone()
    out[0, 17] = 0.31
    out[1, 3] = 0.002
    f = _message(
        expect_close, "attention_out", out, ref, atol=1e-3, hint="did you apply the mask before softmax?"
    )
    assert f.message == (
        "`attention_out` differs from the reference at position (0, 17): got 0.31, expected 0; "
        "max abs error 0.31 > tolerance 0.001 (atol 0.001, rtol 0); 2 of 64 elements are out of tolerance; "
        "did you apply the mask before softmax?"
    )
    assert f.hints == ["did you apply the mask before softmax?"]


def test_expect_close_passes_within_tolerance_and_returns_max_error():
    ref = torch.linspace(-1, 1, 10)
    assert expect_close("x", ref + 5e-4, ref, atol=1e-3) == pytest.approx(5e-4, rel=1e-3)
    assert expect_close("x", ref * 1.01, ref, atol=0, rtol=0.02) > 0
    f = _message(expect_close, "x", ref * 1.05, ref, atol=0, rtol=0.02)
    assert "rtol 0.02" in f.message


def test_expect_close_explains_shape_and_dtype(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    f = _message(expect_close, "y", torch.zeros(4, 2), torch.zeros(2, 4), atol=1)
    assert "`y` has shape (4, 2) but the reference has shape (2, 4)" in f.message
    assert "transpose" in f.message
    f = _message(expect_close, "y", torch.zeros(8), torch.zeros(2, 4), atol=1)
    assert "reshape" in f.message
    f = _message(expect_close, "y", torch.zeros(3, dtype=torch.float16), torch.zeros(3), atol=1)
    assert "dtype torch.float16 but the reference has dtype torch.float32" in f.message
    assert (
        expect_close("y", torch.zeros(3, dtype=torch.float16), torch.zeros(3), atol=1, check_dtype=False) == 0
    )
    f = _message(expect_close, "y", None, torch.zeros(3), atol=1)
    assert "`y` is None" in f.message and "return" in f.message
    f = _message(expect_close, "y", object(), torch.zeros(3), atol=1)
    assert "should be a tensor" in f.message


def test_expect_close_nan_and_inf():
    f = _message(expect_close, "z", torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), atol=1)
    assert "contains NaN at position (1,)" in f.message
    f = _message(expect_close, "z", torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")]), atol=1)
    assert "where the reference is NaN" in f.message
    same = torch.tensor([float("inf"), float("nan"), 1.0])
    assert expect_close("z", same.clone(), same, atol=0) == 0
    f = _message(expect_close, "z", torch.tensor([float("inf")]), torch.tensor([1.0]), atol=1)
    assert "max abs error inf" in f.message


def test_expect_close_in_chinese(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "zh")
    f = _message(expect_close, "out", torch.ones(3), torch.zeros(3), atol=0.1)
    assert "与参考结果不同" in f.message and "(0,)" in f.message


def test_expect_equal_tensors_and_values():
    expect_equal("ids", torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))
    f = _message(expect_equal, "ids", torch.tensor([1, 5, 3, 7]), torch.tensor([1, 2, 3, 4]))
    assert (
        "`ids` differs from the reference at position (1,): got 5, expected 2 (2 of 4 elements differ)"
        in f.message
    )
    f = _message(expect_equal, "ids", torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 2]))
    assert "dtype torch.int32" in f.message
    expect_equal("n", 3, 3)
    f = _message(expect_equal, "n", 3, 4, hint="count again")
    assert f.message == "`n` is 3, expected 4; count again"


def test_expect_and_expect_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expect(True, "never")
    f = _message(expect, False, "it is false", ["hint one"])
    assert (f.message, f.hints) == ("it is false", ["hint one"])
    f = _message(expect_file, "out.txt")
    assert "`out.txt` does not exist in your lab folder" in f.message
    (tmp_path / "out.txt").write_text("a\nb\nc\n")
    assert expect_file("out.txt").name == "out.txt"
    expect_file("out.txt", "a\nb\nc\n")
    f = _message(expect_file, "out.txt", "a\nX\nc\n")
    assert "first difference on line 2" in f.message
    f = _message(expect_file, "out.txt", b"zz")
    assert "expected content" in f.message
    (tmp_path / "d").mkdir()
    assert "not a regular file" in _message(expect_file, "d").message
