"""Step 2: static placement. The repack to GGUF is bit-exact, cold experts run on the CPU (the
activations travel, not the weights), the output equals the reference, the budget holds."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import dsv4check as dc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, main, msg, run_function  # noqa: E402

STATIC = {"KT_NUM_GPU_EXPERTS": 32, "KT_SIDE_STREAM": 0, "KT_DYNAMIC_RESIDENT": 0, "KT_PREFILL_STREAM": 0}
HINT_MOE = msg(
    "Finish OffloadEngine.moe() and cpu_part() in offload/engine.py (the step 2 TODOs).",
    "完成 offload/engine.py 里 OffloadEngine.moe() 和 cpu_part()（第 2 步的 TODO）。",
)


def check_repack() -> None:
    blocks, scales = dc.ckpt().expert_codes(1, "gate_up")
    blocks, scales = blocks[:3].clone(), scales[:3].clone()
    hint = msg(
        "Open offload/cpu_kernel.py and implement repack_mxfp4_to_gguf().",
        "打开 offload/cpu_kernel.py，实现 repack_mxfp4_to_gguf()。",
    )
    got = run_function("offload/cpu_kernel.py", "repack_mxfp4_to_gguf", blocks, scales, timeout=60).unwrap(
        hint
    )
    want = dc.gguf_reference(blocks, scales)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
        raise Failure(
            msg(
                f"repack_mxfp4_to_gguf must return uint8 [..., K/32, 17]; got {getattr(got, 'shape', type(got).__name__)}, expected {tuple(want.shape)}.",
                f"repack_mxfp4_to_gguf 必须返回 uint8 [..., K/32, 17]；实际 {getattr(got, 'shape', type(got).__name__)}，应为 {tuple(want.shape)}。",
            ),
            [hint],
        )
    got = got.to(torch.uint8)
    if torch.equal(got, want):
        return
    if not torch.equal(got[..., 0], want[..., 0]):
        raise Failure(
            msg(
                "Byte 0 of each GGUF block must be the block's E8M0 scale, copied unchanged.",
                "每个 GGUF 块的第 0 个字节必须是该块的 E8M0 scale，原样复制。",
            ),
            [hint],
        )
    swapped = ((want[..., 1:] >> 4) | (want[..., 1:] << 4)).to(torch.uint8)
    consecutive = blocks.reshape(*blocks.shape[:-1], -1, 16)
    if torch.equal(got[..., 1:], swapped):
        why = msg(
            "the two nibbles of every byte are swapped: element j goes in the LOW nibble of qs[j], element j+16 in the HIGH one.",
            "每个字节的高低半字节放反了：元素 j 在 qs[j] 的低 4 位，元素 j+16 在高 4 位。",
        )
    elif torch.equal(got[..., 1:], consecutive):
        why = msg(
            "the codes were copied in the checkpoint's consecutive order (2i | 2i+1); GGUF pairs element j with element j+16.",
            "编码按检查点的相邻顺序（2i | 2i+1）原样复制了；GGUF 把元素 j 与元素 j+16 放在一个字节。",
        )
    else:
        bad = int((got != want).sum())
        why = msg(f"{bad} bytes differ from the expected layout.", f"有 {bad} 个字节与期望布局不同。")
    raise Failure(
        msg(
            f"The GGUF repack is not bit-exact: {why} With these bytes the CPU experts compute with the wrong weights.",
            f"GGUF 重排不是逐位一致的：{why} 这样 CPU 专家会用错误的权重计算。",
        ),
        [hint],
    )


def check() -> tuple[str, dict[str, float]]:
    check_repack()
    reqs = dc.requests(3, 48, 12)
    ref, _ = dc.reference_logits(reqs, 48)
    got = dc.serve(reqs, 48, STATIC, HINT_MOE)
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
            f"{100 * h:.1f} % 的解码专家槽命中卡上专家，TPOT {got['tpot_ms']:.2f} ms（模拟）。",
        ),
        {
            "max_logit_error": err,
            "hit_rate_static": h,
            "tpot_ms": got["tpot_ms"],
            "decode_tok_s": got["decode_tok_s"],
        },
    )


main(check)
