"""Step 2: with the KV cache on the host, twice the baseline batch fits; the output equals the
baseline's and only the indexer's top-k entries cross the link, every step and layer."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import kvcheck as kc  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "In kvoff/offload.py: prefill() keeps the KV in a host tensor (dsa.d2h), append() writes each new token's KV "
    "there too, fetch() gathers the selected rows of that layer and copies them with dsa.h2d().",
    "在 kvoff/offload.py 中：prefill() 把 KV 放在主机张量里（dsa.d2h），append() 也把每个新 token 的 KV 写到那里，"
    "fetch() 取出该层被选中的行，并用 dsa.h2d() 拷到卡上。",
)
STEPS = 12
DISTINCT = 4
# and a short run at a batch other than the model's layer count (2 x the baseline batch is 8, as
# many as the layers: a host cache made [layers, batch, ...] instead of [batch, layers, ...] has
# the same shape there and only breaks at another batch)
SMALL_BATCH, SMALL_STEPS = 3, 3


def check() -> tuple[str, dict[str, float]]:
    cfg = kc.CFG
    b0 = kc.ref_max_batch(cfg, kc.capacity(), kc.PROMPT + STEPS)
    batch = 2 * b0
    # Twice the baseline batch must fit (the emulator's memory and bytes follow the shapes);
    # the output is compared row by row. Four unseen texts in turn (A B C D A B C D): every row's
    # logits differ from its neighbours', so a store that mixes up sequences (one row's cache
    # served to another, a row left out) still shows, for half the prefills.
    tokens, pre = kc.tiled(kc.run_seed("offload"), DISTINCT, batch, STEPS)
    ref = kc.reference(tokens, pre)
    small = (tokens[:SMALL_BATCH, : kc.PROMPT + SMALL_STEPS], (pre[0][:SMALL_BATCH], pre[1][:SMALL_BATCH]))
    calls = kc.Calls([kc.decode_call("host", tokens, pre), kc.decode_call("host", *small)], HINT)
    got = calls[0]
    what = msg(f"Offload at batch {batch}", f"批 {batch} 的 offload")
    kc.oom(got, what, HINT)
    if got["peak_by_tag"].get("kv", 0):
        raise Failure(
            msg(
                f"{what}: {got['peak_by_tag']['kv']} B are still allocated under 'kv' on the device; the KV cache belongs on the host.",
                f"{what}：设备上仍以 'kv' 分配了 {got['peak_by_tag']['kv']} B；KV 缓存应在主机上。",
            ),
            [HINT],
        )
    err = kc.compare_logits(got, ref.logits, what, HINT)
    entry = cfg.kv_entry_bytes
    want_h2d = STEPS * cfg.n_layers * batch * cfg.topk * entry
    want_d2h = batch * cfg.n_layers * (kc.PROMPT + STEPS) * entry
    h2d, d2h = got["h2d_bytes"], got["d2h_bytes"]
    if h2d != want_h2d:
        if h2d == 0:
            why = msg(
                "nothing was copied to the device: fetch() must bring the rows over with dsa.h2d().",
                "没有任何数据拷到卡上：fetch() 必须用 dsa.h2d() 把这些行拷过去。",
            )
        elif h2d > want_h2d:
            why = msg(
                f"that is {h2d / want_h2d:.1f}x the selected entries: copy only the top-k rows of the layer, not more of the cache.",
                f"这是选中条目的 {h2d / want_h2d:.1f} 倍：只拷该层的 top-k 行，不要拷更多缓存。",
            )
        else:
            why = msg("some selected entries were not copied.", "有些选中的条目没有拷贝。")
        raise Failure(
            msg(
                f"{what}: {h2d} B went host -> device; the top-k of every layer and step is {want_h2d} B "
                f"({STEPS} steps x {cfg.n_layers} layers x {batch} sequences x {cfg.topk} entries x {entry} B): "
                + why,
                f"{what}：主机到设备传了 {h2d} B；每层每步的 top-k 共 {want_h2d} B"
                f"（{STEPS} 步 x {cfg.n_layers} 层 x {batch} 条序列 x {cfg.topk} 个条目 x {entry} B）："
                + why,
            ),
            [HINT],
        )
    if d2h != want_d2h:
        raise Failure(
            msg(
                f"{what}: {d2h} B went device -> host; the prompt's KV plus every new token's KV is {want_d2h} B. "
                "Prefill writes the whole cache to the host and every decode step its new token, in every layer.",
                f"{what}：设备到主机传了 {d2h} B；提示词的 KV 加上每个新 token 的 KV 共 {want_d2h} B。"
                "预填充把整份缓存写到主机，每个解码步在每一层写入新 token。",
            ),
            [HINT],
        )
    small_what = msg(f"Offload at batch {SMALL_BATCH}", f"批 {SMALL_BATCH} 的 offload")
    try:
        small_run = calls[1]
    except Failure as exc:  # the same code worked at batch 2 x b0: say which batch broke it
        same = batch == cfg.n_layers
        raise Failure(
            msg(
                f"{small_what} (it ran at batch {batch}"
                + (", as many as the layers: are batch and layers swapped in a shape?" if same else "")
                + f"): {exc.message}",
                f"{small_what}（批 {batch} 时能运行"
                + ("，与层数相同：某个形状里是否把批和层弄反了？" if same else "")
                + f"）：{exc.message}",
            ),
            exc.hints,
        ) from exc
    kc.oom(small_run, small_what, HINT)
    kc.compare_logits(small_run, ref.logits[:SMALL_BATCH, :SMALL_STEPS], small_what, HINT)
    full = cfg.n_layers * (kc.PROMPT + STEPS) * batch * entry
    return (
        msg(
            f"Offload: batch {batch} (2 x {b0}) fits with the KV cache on the host; the output equals the baseline "
            f"(max |Δlogit| {err:.1g} x std); each step brings {want_h2d // STEPS} B over the link, "
            f"{want_h2d / STEPS / full:.2%} of the {full} B cache. The talk: batch 64 -> 128 at 64K.",
            f"Offload：KV 缓存放在主机上后，批 {batch}（2 x {b0}）放得下；输出与基线一致（max |Δlogit| {err:.1g} 倍标准差）；"
            f"每步经链路传 {want_h2d // STEPS} B，是 {full} B 缓存的 {want_h2d / STEPS / full:.2%}。演讲：64K 下批从 64 到 128。",
        ),
        {"batch": batch, "h2d_bytes_per_step": want_h2d / STEPS},
    )


main(check)
