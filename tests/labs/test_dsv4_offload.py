"""dsv4-offload: the toy DeepSeek-V4-Flash's formats and proportions (fast unit tests).

The checkers themselves are exercised by ``test_all_labs.py``: the selftest runs the solution and
every wrong solution in ``labs/dsv4-offload/mutants/`` (each must fail its step with its phrase).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
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


#: How far the float32 values ``make_weights`` computes may drift between CPUs (vector width of
#: the reductions, the QR's LAPACK kernels, the transcendental functions behind ``randn``) and
#: thread counts, relative to the tensor's largest value. The QR is the worst case: this float32
#: Q is 2^-21 of max|Q| from the exact (float64) one, so two float32 implementations are within
#: 2^-20; randn's paths differ by a few float32 ulps. 2^-18 leaves a factor 4 over both.
DRIFT = 2.0**-18
#: Share of the stored elements a drift that small may push onto the neighbouring bf16 / int8 /
#: E2M1 / E8M0 code (it has to sit next to a rounding boundary): 2.4e-4 seen at most (bf16,
#: between the AVX512 and scalar kernels), 2^-8 = 3.9e-3 allowed. A changed constant, seed or
#: rule moves far more: 1 % on EXPERT_STD changes ~3 % of the E2M1 codes.
ROUNDING_FLIPS = 2.0**-8


def _flipped(name: str, moved: torch.Tensor) -> str | None:
    share = float(moved.float().mean()) if moved.numel() else 0.0
    return f"{name}: {share:.2%} of the elements differ" if share > ROUNDING_FLIPS else None


def _not_the_script_output(
    name: str, built: dict[str, torch.Tensor], shipped: dict[str, torch.Tensor]
) -> str | None:
    """Why ``shipped[name]`` is not ``built[name]`` up to CPU rounding (None if it is).

    Floats may differ by the drift plus one rounding step of their dtype, and (bf16) only on a
    few elements; int8 codes by one, on a few elements; MXFP4 experts are compared as the values
    their codes and block scales decode to, one E2M1 step of the coarser scale apart at most."""
    a, b = built[name], shipped[name]
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{name}: {a.dtype} {tuple(a.shape)} built, {b.dtype} {tuple(b.shape)} shipped"
    if torch.equal(a, b):
        return None
    if name.endswith(".scales"):  # judged with their blocks, beside them
        moved = a.int() - b.int()
        if int(moved.abs().max()) > 1:
            return f"{name}: a block exponent moved by {int(moved.abs().max())}"
        return _flipped(name, moved != 0)
    if name.endswith(".blocks"):
        scales = name.removesuffix(".blocks") + ".scales"
        sa, sb = built[scales], shipped[scales]
        va = mxfp4.dequantize(mxfp4.unpack_consecutive(a), sa)
        vb = mxfp4.dequantize(mxfp4.unpack_consecutive(b), sb)
        # the E2M1 grid steps by at most 2 x the block scale (4 -> 6); a scale one apart re-rounds
        # every value of the block, still within one step of the coarser scale
        step = 2 * torch.exp2(torch.maximum(sa, sb).float() - 127).repeat_interleave(mxfp4.BLOCK, -1)
        if bool(((va - vb).abs() > step).any()):
            return f"{name}: a value moved by more than one E2M1 step"
        return _flipped(name, va != vb)
    if not a.is_floating_point():
        if int((a.int() - b.int()).abs().max()) > 1:
            return f"{name}: an int8 code moved by more than one"
        return _flipped(name, a != b)
    af, bf = a.double(), b.double()
    _, exp = torch.frexp(torch.maximum(af.abs(), bf.abs()))
    ulp = torch.finfo(a.dtype).eps * torch.exp2(exp.double() - 1)
    tol = DRIFT * float(bf.abs().max()) + ulp
    if bool(((af - bf).abs() > tol).any()):
        worst = float(((af - bf).abs() / tol).max())
        return f"{name}: a value moved by {worst:.1f}x the drift plus one rounding step"
    # a float32 tensor carries the drift on every element; a bf16 one rounds most of it away
    return _flipped(name, a != b) if a.element_size() <= 2 else None


def test_shipped_weights_are_the_seeded_script_output() -> None:
    """The shipped file is what ``make_weights.py`` makes, up to the rounding of this CPU (the
    file itself is what every machine loads, so only its provenance is checked here)."""
    ckpt = Checkpoint.load()
    built = build(ckpt.cfg)
    assert built.keys() == ckpt.tensors.keys()
    problems = [p for name in built if (p := _not_the_script_output(name, built, ckpt.tensors))]
    assert problems == []


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


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread, as the lab's scripts and checkers run; put back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_expert_popularity_depends_on_the_prompt() -> None:
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


def _dsv4check():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(LAB / "checks"))
    import dsv4check

    return dsv4check


def test_the_mistakes_the_issue_names_are_mutants() -> None:
    """The wrong solutions that used to be test fixtures, and the ordering mistake of issue #15."""
    names = {p.parent.relative_to(LAB / "mutants").as_posix() for p in (LAB / "mutants").rglob("mutant.yaml")}
    assert {
        "static-placement/wrong-nibble-order",
        "static-placement/wrong-expert-weights",
        "static-placement/repack-by-requantizing",
        "dynamic-residency/load-before-evict",
        "dynamic-residency/hot-set-of-another-layer",
        "overlap/cpu-work-on-main-stream",
        "overlap/no-wait-before-combine",
        "report/figure-from-the-talk",
        "report/no-clamp",
        "streaming-prefill/bench-another-config",
    } <= names


def test_a_combine_before_the_side_stream_ends_is_a_race() -> None:
    dc = _dsv4check()
    cpu = [
        ("d2h:activations", "cpu", 1.0, 1.5),
        ("cpu_expert_mxfp4_q8_0", "cpu", 1.5, 9.0),
        ("h2d:activations", "cpu", 9.0, 9.5),
    ]
    card = [("shared_expert.gate_up", "main", 1.0, 2.0), ("routed_expert.down", "main", 2.0, 3.0)]
    waited = [
        ("router", "main", 0.0, 1.0),
        *cpu,
        *card,
        ("moe_combine", "main", 9.5, 9.6),
        ("rms_norm", "main", 9.6, 9.7),
    ]
    assert dc.first_race(waited) is None
    racing = [("router", "main", 0.0, 1.0), *cpu, *card, ("moe_combine", "main", 3.0, 3.1)]
    op, early, index = dc.first_race(racing)
    assert (op, index) == ("moe_combine", 1) and early == pytest.approx(6.5)
    # the next layer's work may not start early either, combine or not
    assert dc.first_race([*cpu, ("rms_norm", "main", 0.5, 0.6)])[0] == "rms_norm"


def test_check_inputs_depend_on_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    dc = _dsv4check()
    seeds = set()
    for run in ("a", "b", "c", "d"):
        monkeypatch.setenv("LAB_RUN_ID", run)
        seeds.add(dc.run_seed("prompts"))
    assert len(seeds) == 4


def test_the_q8_0_round_trip_in_one_pass_is_bit_for_bit_the_two_steps() -> None:
    """The CPU kernel and the checker's reference use ``round_trip_q8_0`` (one pass, issue 30):
    it must give exactly what quantising to Q8_0 and back gives, all-zero blocks and large,
    tiny and mixed magnitudes included."""
    g = torch.Generator().manual_seed(0)
    for rows, cols in [(1, 64), (7, 64), (30, 32)]:
        for scale in (1e-3, 1.0, 50.0, 1e4):
            x = torch.randn(rows, cols, generator=g) * scale
            x[0, :32] = 0.0
            x[-1, -32:] *= 1e-6
            assert torch.equal(mxfp4.round_trip_q8_0(x), mxfp4.dequantize_q8_0(*mxfp4.quantize_q8_0(x)))
