"""dsv4-offload: the toy DeepSeek-V4-Flash's formats and proportions (fast unit tests).

The checkers themselves are exercised by ``test_all_labs.py`` (selftest) and
``test_dsv4_offload_fixtures.py`` (wrong solutions).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

LAB = Path(__file__).resolve().parents[2] / "labs" / "dsv4-offload"
sys.path.insert(0, str(LAB / "starter"))

from dsv4flash import REAL, Checkpoint, ModelConfig, Reference, mxfp4, toy_scale  # noqa: E402
from dsv4flash.make_weights import build  # noqa: E402


def test_e2m1_quantisation_follows_the_ocp_rule() -> None:
    # amax 6 -> shared exponent floor(log2 6) - 2 = 0: values land on the E2M1 grid unchanged
    w = torch.tensor([[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0] * 4])
    codes, scales = mxfp4.quantize(w)
    assert scales.tolist() == [[127]]
    assert torch.equal(mxfp4.dequantize(codes, scales), w)
    # amax 7 -> exponent 0 too, so 7 saturates to 6; 0.25 and 2.5 are ties that go to the even code
    w = torch.tensor([[7.0, -0.25, 2.5, 0.75] + [0.0] * 28])
    codes, scales = mxfp4.quantize(w)
    assert mxfp4.dequantize(codes, scales)[0, :4].tolist() == [6.0, -0.0, 2.0, 1.0]


def test_checkpoint_and_gguf_nibble_orders() -> None:
    codes = torch.arange(32, dtype=torch.uint8) % 16
    packed = mxfp4.pack_consecutive(codes[None])[0]
    assert packed[0] == (0 | 1 << 4) and packed[1] == (2 | 3 << 4)  # low nibble = even index
    assert torch.equal(mxfp4.unpack_consecutive(packed[None])[0], codes)
    block = torch.cat((torch.tensor([130], dtype=torch.uint8), codes[:16] | (codes[16:] << 4)))
    got_codes, got_scale = mxfp4.unpack_gguf(block[None, None])
    assert torch.equal(got_codes[0], codes) and got_scale.item() == 130


def test_q8_0_round_trip_error_is_small() -> None:
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    q, d = mxfp4.quantize_q8_0(x)
    assert q.dtype == torch.int8 and d.dtype == torch.float16 and d.shape == (4, 2)
    assert (mxfp4.dequantize_q8_0(q, d) - x).abs().max() <= d.float().max() * 0.51


def test_shipped_weights_are_the_seeded_script_output() -> None:
    torch.set_num_threads(1)  # as the script does: the QR and matmuls round the same way
    ckpt = Checkpoint.load()
    built = build(ckpt.cfg)
    assert built.keys() == ckpt.tensors.keys()
    for name, t in built.items():
        assert torch.equal(t, ckpt.tensors[name]), name


def test_experts_convert_to_w8a8_without_loss() -> None:
    ckpt = Checkpoint.load()
    for layer in range(ckpt.cfg.n_layers):
        for proj in ("gate_up", "down"):
            _, scales = ckpt.expert_codes(layer, proj)
            spread = scales.int().amax(-1) - scales.int().amin(-1)
            assert int(spread.max()) <= 3, (
                "a row whose block exponents differ by more than 3 cannot be int8-exact"
            )


def test_toy_keeps_the_real_deployments_proportions() -> None:
    cfg = ModelConfig.load()
    s = toy_scale(cfg)
    capacity = 64 * 2**30 * s
    w8 = (2 * cfg.moe_inter * cfg.d_model + 2 * cfg.moe_inter * 4) + (
        cfg.d_model * cfg.moe_inter + cfg.d_model * 4
    )
    hot = cfg.n_layers * REAL["hot_experts_per_layer"] * w8
    assert cfg.n_routed_experts == REAL["n_routed_experts"] and cfg.top_k == REAL["top_k"]
    assert hot / capacity == pytest.approx(34.6 / 64, abs=0.01)  # real: 43 x 32 x 25.2 MB of 64 GB
    expert_mxfp4 = 3 * cfg.moe_inter * cfg.d_model * 17 / 32
    assert (
        cfg.n_layers * cfg.n_routed_experts * expert_mxfp4 > 2 * capacity
    )  # experts do not fit even in MXFP4
    # every routed slot of a token on the CPU (H = 0): the talk's 24.8 ms per token, emulated at 142 GB/s
    toy_ms = cfg.n_layers * cfg.top_k * expert_mxfp4 / (142e9 * s) * 1e3
    assert toy_ms == pytest.approx(24.8, rel=0.05)


def test_expert_popularity_depends_on_the_prompt() -> None:
    torch.set_num_threads(1)
    from dsv4flash import Tokenizer, make_prompt, vocabulary

    ckpt = Checkpoint.load()
    ref = Reference(ckpt)
    tok = Tokenizer(vocabulary(ckpt.cfg.vocab_size))
    counts = {}
    for topic in ("space", "finance"):
        ref.trace = []
        ref.prefill(tok.encode(make_prompt(topic, 96, 3)))
        c = torch.zeros(ckpt.cfg.n_routed_experts)
        for layer, ids in ref.trace:
            if layer == 0:
                c += torch.bincount(ids.flatten(), minlength=ckpt.cfg.n_routed_experts)
        counts[topic] = c
    top_space = counts["space"].topk(32).indices
    own = counts["space"][top_space].sum() / counts["space"].sum()
    other = counts["finance"][top_space].sum() / counts["finance"].sum()
    first32 = counts["space"][:32].sum() / counts["space"].sum()
    assert own > 0.35 and other < 0.75 * own and first32 < own / 3, (own, other, first32)
