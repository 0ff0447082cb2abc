"""Step 2: static placement. The repack to GGUF is bit-exact, cold experts run on the CPU (the
activations travel, not the weights), the output equals the reference, the budget holds."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsv4check as dc  # noqa: E402
import torch  # noqa: E402
from dsv4flash import mxfp4  # noqa: E402
from labkit.check import Failure, main, msg, run_function  # noqa: E402

STATIC = {"KT_NUM_GPU_EXPERTS": 32, "KT_SIDE_STREAM": 0, "KT_DYNAMIC_RESIDENT": 0, "KT_PREFILL_STREAM": 0}
HINT_MOE = msg(
    "Finish OffloadEngine.moe() and cpu_part() in offload/engine.py (the step 2 TODOs).",
    "完成 offload/engine.py 里 OffloadEngine.moe() 和 cpu_part()（第 2 步的 TODO）。",
)


REPACK_HINT = msg(
    "Open offload/cpu_kernel.py and implement repack_mxfp4_to_gguf().",
    "打开 offload/cpu_kernel.py，实现 repack_mxfp4_to_gguf()。",
)


def repack_inputs() -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    """Three experts of a layer of this run, and random bytes: every code 0..15 (-0 and the sign
    bit included), blocks whose largest code is small, scales far from the checkpoint's. On the
    checkpoint's own blocks a re-quantization happens to give the same bytes; on these it does not."""
    cfg = dc.ckpt().cfg
    layer = dc.run_choice("layer", list(range(cfg.n_layers)))
    first = dc.run_seed("expert") % (cfg.n_routed_experts - 3)
    blocks, scales = dc.ckpt().expert_codes(layer, dc.run_choice("proj", ["gate_up", "down"]))
    g = torch.Generator().manual_seed(dc.run_seed("bytes"))
    rand = torch.randint(0, 256, (2, 4, 32), generator=g, dtype=torch.uint8)
    rand[0, 0] &= 0x33  # one row of small codes only (|value| <= 1.5 x scale)
    rand[1, 1] = 0x88  # -0 everywhere
    return [
        (
            f"layer {layer}",
            f"第 {layer} 层",
            blocks[first : first + 3].clone(),
            scales[first : first + 3].clone(),
        ),
        ("random", "随机", rand, torch.randint(110, 140, (2, 4, 2), generator=g, dtype=torch.uint8)),
    ]


def explain_repack(got: torch.Tensor, want: torch.Tensor, blocks: torch.Tensor) -> str:
    """What is wrong with ``got`` in the attendee's terms (``got != want``)."""
    swapped = ((want[..., 1:] >> 4) | (want[..., 1:] << 4)).to(torch.uint8)
    consecutive = blocks.reshape(*blocks.shape[:-1], -1, 16)
    if torch.equal(got[..., 1:], swapped) and torch.equal(got[..., 0], want[..., 0]):
        return msg(
            "the two nibbles of every byte are swapped: element j goes in the LOW nibble of qs[j], element j+16 in the HIGH one.",
            "每个字节的高低半字节放反了：元素 j 在 qs[j] 的低 4 位，元素 j+16 在高 4 位。",
        )
    if torch.equal(got[..., 1:], consecutive) and torch.equal(got[..., 0], want[..., 0]):
        return msg(
            "the codes were copied in the checkpoint's consecutive order (2i | 2i+1); GGUF pairs element j with element j+16.",
            "编码按检查点的相邻顺序（2i | 2i+1）原样复制了；GGUF 把元素 j 与元素 j+16 放在一个字节。",
        )
    values = [mxfp4.dequantize(*mxfp4.unpack_gguf(t)) for t in (got, want)]
    if torch.equal(values[0], values[1]):
        i = int((got != want).any(-1).flatten().nonzero()[0])
        g, w = got.reshape(-1, 17)[i].tolist(), want.reshape(-1, 17)[i].tolist()
        return msg(
            f"the values decode the same but the bytes differ (block {i}: scale {g[0]} vs {w[0]}, qs {g[1:5]}... vs {w[1:5]}...): "
            "the codes were re-quantized (new scales, -0 turned into +0) instead of moved. The repack moves bytes only: copy "
            "the E8M0 byte and each 4-bit code unchanged.",
            f"数值解码后相同，但字节不同（块 {i}：scale {g[0]} 对 {w[0]}，qs {g[1:5]}… 对 {w[1:5]}…）：编码被重新量化了"
            "（scale 重新计算，-0 变成 +0），而不是搬运。重排只移动字节：E8M0 字节和每个 4 位编码都原样复制。",
        )
    if not torch.equal(got[..., 0], want[..., 0]):
        return msg(
            "byte 0 of each GGUF block must be the block's E8M0 scale, copied unchanged.",
            "每个 GGUF 块的第 0 个字节必须是该块的 E8M0 scale，原样复制。",
        )
    bad = int((got != want).sum())
    return msg(f"{bad} bytes differ from the expected layout.", f"有 {bad} 个字节与期望布局不同。")


def check_repack() -> None:
    for name, name_zh, blocks, scales in repack_inputs():
        got = run_function(
            "offload/cpu_kernel.py", "repack_mxfp4_to_gguf", blocks, scales, timeout=60
        ).unwrap(REPACK_HINT)
        want = dc.gguf_reference(blocks, scales)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            raise Failure(
                msg(
                    f"repack_mxfp4_to_gguf must return uint8 [..., K/32, 17]; got {getattr(got, 'shape', type(got).__name__)}, "
                    f"expected {tuple(want.shape)} (input {name} {tuple(blocks.shape)}).",
                    f"repack_mxfp4_to_gguf 必须返回 uint8 [..., K/32, 17]；实际 {getattr(got, 'shape', type(got).__name__)}，"
                    f"应为 {tuple(want.shape)}（输入：{name_zh} {tuple(blocks.shape)}）。",
                ),
                [REPACK_HINT],
            )
        got = got.to(torch.uint8)
        if not torch.equal(got, want):
            raise Failure(
                msg(
                    f"The GGUF repack is not bit-exact on {name} blocks: {explain_repack(got, want, blocks)} "
                    "With these bytes the CPU experts compute with the wrong weights.",
                    f"GGUF 重排在{name_zh}的块上不是逐位一致的："
                    f"{explain_repack(got, want, blocks)} 这样 CPU 专家会用错误的权重计算。",
                ),
                [REPACK_HINT],
            )


def check_cpu_part() -> None:
    """cpu_part() on tokens of this run, with every case of the cold mask: a token whose experts
    are all cold, one whose experts are all on the card (it must not be sent), mixed ones."""
    cfg = dc.ckpt().cfg
    g = torch.Generator().manual_seed(dc.run_seed("cpu_part"))
    n, k = 8, cfg.top_k
    layer = int(torch.randint(0, cfg.n_layers, (1,), generator=g))
    m = torch.randn(n, cfg.d_model, generator=g)
    ids = torch.stack([torch.randperm(cfg.n_routed_experts, generator=g)[:k] for _ in range(n)])
    w = torch.rand(n, k, generator=g) + 0.1
    w = w / w.sum(-1, keepdim=True)
    cold = torch.rand(n, k, generator=g) < 0.5
    cold[0], cold[1], cold[5] = True, False, False
    rows, y = dc.harness(
        "cpu_part", layer, m, w, ids, cold, call="offload/engine.py: OffloadEngine.cpu_part()", hint=HINT_MOE
    )
    want_rows = cold.any(-1).nonzero().flatten()
    if sorted(rows.tolist()) != want_rows.tolist():
        raise Failure(
            msg(
                f"cpu_part() sent tokens {rows.tolist()} to the CPU; the tokens with at least one cold expert are "
                f"{want_rows.tolist()} (tokens 1 and 5 have all their experts on the card).",
                f"cpu_part() 把 token {rows.tolist()} 送到了 CPU；至少有一个冷专家的 token 是 {want_rows.tolist()}"
                "（token 1 和 5 的专家全部在卡上）。",
            ),
            [HINT_MOE],
        )
    want = dc.cpu_experts_sum(layer, m, w, ids, cold)
    if tuple(y.shape) != (len(want_rows), cfg.d_model):
        raise Failure(
            msg(
                f"cpu_part() must return (rows, sum [rows, D]); the sum has shape {tuple(y.shape)}, expected {(len(want_rows), cfg.d_model)}.",
                f"cpu_part() 必须返回 (rows, sum [rows, D])；sum 的形状为 {tuple(y.shape)}，应为 {(len(want_rows), cfg.d_model)}。",
            ),
            [HINT_MOE],
        )
    order = torch.as_tensor(sorted(range(len(rows)), key=lambda i: int(rows[i])))
    err = (y[order] - want[want_rows]).abs().amax(-1) / want[want_rows].abs().amax().clamp_min(1e-9)
    bad = [int(want_rows[i]) for i in (err > 1e-3).nonzero().flatten()]
    if not bad:
        return
    if 0 in bad:  # token 0 has all its experts cold and comes first: no indexing of rows can move it
        raise Failure(
            msg(
                f"cpu_part() returns wrong values for tokens {bad}, token 0 included (all six of its experts are cold): the CPU "
                "experts compute with the wrong weights (the wrong expert, or the wrong routing weights).",
                f"cpu_part() 对 token {bad} 的结果不对，包括 token 0（它的六个专家都是冷的）：CPU 专家用了错误的权重计算"
                "（算错了专家，或乘错了路由权重）。",
            ),
            [HINT_MOE],
        )
    raise Failure(
        msg(
            f"cpu_part() returns the wrong weighted sum for tokens {bad} of a batch where tokens 1 and 5 need no CPU expert: "
            "each cold slot's output must be weighted by that token's own routing weight. A batch where every token has a "
            "cold expert (as in most decode steps) hides this.",
            f"在 token 1 和 5 不需要 CPU 专家的一批 token 中，cpu_part() 对 token {bad} 返回的加权和不对：每个冷专家槽的输出"
            "必须乘以该 token 自己的路由权重。每个 token 都有冷专家的批次（大多数解码步就是这样）看不出这个错误。",
        ),
        [HINT_MOE],
    )


def check() -> tuple[str, dict[str, float]]:
    check_repack()
    check_cpu_part()
    # two prompts (the second on a used engine) of 32 tokens and 6 decode steps: every expert a
    # token routes to is judged in the logits, prefill batches and single tokens alike
    reqs = dc.requests(2, 32, 6)
    ref, _ = dc.reference_logits(reqs, 32)
    got = dc.serve(reqs, 32, STATIC, HINT_MOE)
    err = dc.compare_logits(got, ref, msg("Static placement", "静态放置"), HINT_MOE)
    w8, mx = dc.expert_bytes()
    c = dc.ckpt().cfg
    for i, req in enumerate(got["requests"]):
        want = [list(range(32))] * c.n_layers
        if req["resident"] != want:
            raise Failure(
                msg(
                    f"Static placement keeps experts 0..31 of every layer on the card; request {i} found {req['resident']}.",
                    f"静态放置应把每层的 0..31 号专家放在卡上；请求 {i} 看到的是 {req['resident']}。",
                ),
                [HINT_MOE],
            )
    hot = got["used_by_tag_after_load"].get("hot_experts", 0)
    if hot != c.n_layers * 32 * w8:
        raise Failure(
            msg(
                f"Device memory under 'hot_experts' is {hot} B; 4 layers x 32 experts x {w8} B = {c.n_layers * 32 * w8} B were expected.",
                f"'hot_experts' 标签下的设备内存为 {hot} B；应为 4 层 × 32 个专家 × {w8} B = {c.n_layers * 32 * w8} B。",
            ),
            [HINT_MOE],
        )
    slots = sum(r["slots"] for r in got["requests"])
    hits = sum(r["hits"] for r in got["requests"])
    if not got["engines_busy_ms"].get("host", 0.0):
        raise Failure(
            msg(
                "No expert ran on the CPU: the cold experts (not resident on the card) must be computed by the CPU kernel (CpuExperts.expert).",
                "没有专家在 CPU 上运行：不在卡上的冷专家必须由 CPU 内核（CpuExperts.expert）计算。",
            ),
            [HINT_MOE],
        )
    moved = sum(
        v for k, v in got["op_bytes"].items() if k.startswith(("h2d:", "d2h:")) and "activations" not in k
    )
    static_load = got["static_bytes"] - got["used_by_tag_after_load"].get("kv_cache", 0)
    if moved > static_load:
        raise Failure(
            msg(
                f"{moved - static_load} B of weights crossed the host link after loading: move the activations to the CPU experts, not the experts' weights to the card.",
                f"加载之后仍有 {moved - static_load} B 权重经过主机链路：应把激活送到 CPU 专家，而不是把专家权重搬上卡。",
            ),
            [HINT_MOE],
        )
    h = hits / slots if slots else 0.0
    if not 0.02 < h < 0.5:
        raise Failure(
            msg(
                f"Hit rate H = {h:.3f} is implausible for the first 32 of 256 experts: count only routed slots served by resident experts.",
                f"对 256 个专家中的前 32 个来说，命中率 H = {h:.3f} 不合理。",
            ),
            [HINT_MOE],
        )
    return (
        msg(
            f"Static placement works: output equals the reference (max |Δlogit| {err:.4f} x std), the repack is bit-exact, "
            f"{100 * h:.1f} % of decode expert slots hit the card, TPOT {got['tpot_ms']:.2f} ms (emulated).",
            f"静态放置正确：输出与参考一致（max |Δlogit| {err:.4f} 倍标准差），重排逐位一致，"
            f"{100 * h:.1f} % 的解码专家槽命中卡上专家，TPOT {got['tpot_ms']:.2f} ms（仿真）。",
        ),
        {
            "max_logit_error": err,
            "hit_rate_static": h,
            "tpot_ms": got["tpot_ms"],
            "decode_tok_s": got["decode_tok_s"],
        },
    )


main(check)
