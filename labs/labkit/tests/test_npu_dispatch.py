"""labkit.npu plumbing: forwarding to (a fake) torch_npu, and charging the emulated device."""

from __future__ import annotations

import sys
import types

import torch
from labkit import emu, mx
from labkit.npu import (
    _common,
    attention,
    moe,
    norm,
    npu_add_rms_norm,
    npu_dynamic_mx_quant,
    npu_fused_infer_attention_score,
    npu_fusion_attention,
    npu_grouped_matmul,
    npu_moe_gating_top_k_softmax,
    npu_quant_matmul,
    npu_rms_norm,
    npu_rotary_mul,
    npu_swiglu,
    quant,
    rope,
)


def test_fake_torch_npu_receives_the_call_unchanged(monkeypatch):
    calls = []

    def recorder(name):
        def fn(*args, **kwargs):
            calls.append((name, args, kwargs))
            return f"npu:{name}"

        return fn

    fake = types.ModuleType("torch_npu")
    for name in ("npu_rms_norm", "npu_swiglu", "npu_rotary_mul", "npu_grouped_matmul", "npu_fused_infer_attention_score",
                 "npu_dynamic_mx_quant"):  # fmt: skip
        setattr(fake, name, recorder(name))
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    for module in (norm, rope, moe, attention, quant):
        monkeypatch.setattr(module, "on_npu", lambda *a: True)
    x = torch.ones(2, 4)
    assert npu_rms_norm(x, torch.ones(4), 1e-5) == "npu:npu_rms_norm"
    assert calls[-1][1][2] == 1e-5
    assert npu_swiglu(x, dim=0) == "npu:npu_swiglu" and calls[-1][2] == {"dim": 0}
    assert npu_rotary_mul(x, x, x, rotary_mode="interleave") == "npu:npu_rotary_mul"
    assert calls[-1][2] == {"rotary_mode": "interleave"}
    npu_grouped_matmul([x], [x], group_list=[2], split_item=2, group_type=0, group_list_type=1)
    assert calls[-1][2]["group_list_type"] == 1 and calls[-1][2]["split_item"] == 2
    npu_fused_infer_attention_score(x, x, x, num_heads=4, input_layout="BNSD", sparse_mode=3, block_table=x)
    assert calls[-1][2]["num_heads"] == 4 and calls[-1][2]["block_table"] is x
    npu_dynamic_mx_quant(x, axis=0, dst_type="fp4-ish")
    assert calls[-1][2]["axis"] == 0 and calls[-1][2]["dst_type"] == "fp4-ish"


def test_on_npu_looks_at_tensors_and_lists():
    assert not _common.on_npu(torch.ones(1), [torch.ones(1)], None, 3)


def _run_every_op() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=g)
    npu_rms_norm(x, torch.ones(64))
    npu_add_rms_norm(x, x, torch.ones(64))
    npu_swiglu(x)
    q = torch.randn(1, 2, 4, 8, generator=g)
    npu_rotary_mul(q, torch.ones(1, 1, 4, 8), torch.zeros(1, 1, 4, 8))
    npu_moe_gating_top_k_softmax(torch.randn(4, 8, generator=g), k=2)
    npu_grouped_matmul([x], [torch.randn(2, 64, 16, generator=g)], group_list=[1, 3], split_item=2, group_type=0,
                       group_list_type=1)  # fmt: skip
    npu_fusion_attention(q, q, q, 2, "BNSD", scale=0.3)
    npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BNSD", scale=0.3)
    xq, xs = npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    wq, ws = npu_dynamic_mx_quant(torch.randn(16, 64, generator=g), dst_type=torch.float8_e4m3fn)
    npu_quant_matmul(xq, wq.t(), ws.transpose(0, 1), pertoken_scale=xs, output_dtype=torch.bfloat16)


def test_every_op_charges_one_fused_launch_to_the_emulated_device():
    with emu.session("910B", measurer=False) as s:
        _run_every_op()
    report = s.report()
    expected = {
        "rms_norm", "add_rms_norm", "swiglu", "rotary_mul", "moe_gating_top_k_softmax", "grouped_matmul",
        "fusion_attention", "fused_infer_attention_score", "dynamic_mx_quant", "quant_matmul",
    }  # fmt: skip
    assert expected <= set(report.ops)
    for name in expected:
        stats = report.ops[name]
        assert stats.launches == stats.count == stats.fused, name
        assert stats.bytes > 0 and stats.time_ms > 0, name
    assert report.ops["dynamic_mx_quant"].count == 2
    # flash attention FLOPs: 4 * B * N * Sq * Skv * D with no mask
    assert report.ops["fusion_attention"].flops == 4 * 1 * 2 * 4 * 4 * 8
    # grouped matmul: 2 * rows * K * N
    assert report.ops["grouped_matmul"].flops == 2 * 4 * 64 * 16


def test_causal_attention_charges_only_unmasked_pairs():
    q = torch.randn(1, 1, 8, 4)
    with emu.session("910B", measurer=False) as s:
        npu_fusion_attention(q, q, q, 1, "BNSD", sparse_mode=2)
    assert s.report().ops["fusion_attention"].flops == 4 * 36 * 4  # 8*9/2 = 36 visible pairs


def test_mx_linear_moves_quantized_weight_bytes():
    w = mx.quantize_mx(torch.randn(32, 64), "mxfp4")
    with emu.session("910B", measurer=False) as s:
        mx.mx_linear(torch.randn(1, 64), w)
    assert s.report().ops["mx_matmul"].bytes == 64 * 4 + w.nbytes + 32 * 4


def test_ops_work_when_labkit_emu_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "labkit.emu", None)  # import labkit.emu -> ImportError
    monkeypatch.setattr(_common, "_emu_account", [])
    y, rstd = npu_rms_norm(torch.ones(2, 4), torch.ones(4))
    assert torch.allclose(y, torch.ones(2, 4), atol=1e-5)
    assert _common._emu_account == [None]
