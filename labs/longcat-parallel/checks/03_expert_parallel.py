"""Step 3: expert-parallel MoE on 4 gloo ranks equals the single-process MoE; zero experts are
neither dispatched (all-to-all volume) nor computed (rows per expert), on routings of this run
(a rank whose tokens all chose zero experts included) and in the tiny model (DP attention)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import torch  # noqa: E402
from labkit.check import main  # noqa: E402
from labkit.longcat import TinyLongcat, TinyLongcatConfig  # noqa: E402
from lc_harness import moe_case  # noqa: E402
from lccheck import WORLD, Failure, a2a_elements, choice, max_err, msg, ranks, rng, run_seed  # noqa: E402

TOL = 1e-4
FIX = msg("Fix ep_moe() in ep_moe.py.", "修改 ep_moe.py 中的 ep_moe()。")


def variants(
    m: TinyLongcat, layer: int, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor
) -> dict[str, torch.Tensor]:
    zero = ids >= m.cfg.n_routed
    return {
        "twice": m.moe(layer, x, ids, torch.where(zero, w, w * w)),
        "twice-all": m.moe(layer, x, ids, w * w),
        "zero-dropped": m.moe(layer, x, ids, w * ~zero),
        "unweighted": m.moe(layer, x, ids, torch.ones_like(w)),
        "zero-unweighted": m.moe(layer, x, ids, torch.where(zero, torch.ones_like(w), w)),
    }


NAMES = {
    "twice": msg(
        "the combine weights are applied twice (once on the expert's rank, once again when combining): the result is sum w^2 * E(x)",
        "合并权重被乘了两次（专家所在进程乘一次，合并时又乘一次）：结果成了 sum w^2 * E(x)",
    ),
    "zero-dropped": msg(
        "zero experts contribute nothing: a zero expert's output is the token itself, so it adds w * x (no weights, no dispatch, but not zero)",
        "零专家没有任何贡献：零专家的输出就是 token 本身，应加上 w * x（没有权重、不需要分发，但不是 0）",
    ),
    "twice-all": msg(
        "the combine weights are applied twice: the result is sum w^2 * E(x)",
        "合并权重被乘了两次：结果成了 sum w^2 * E(x)",
    ),
    "unweighted": msg(
        "the expert outputs are summed without the router weights", "专家输出没有乘路由权重就直接相加了"
    ),
    "zero-unweighted": msg(
        "the zero experts' w * x is added without its router weight w", "零专家的 w * x 没有乘路由权重 w"
    ),
}


def check() -> tuple[str, dict[str, float]]:
    g = rng("tokens")
    cfg_seed = run_seed("model") % 1000
    m = TinyLongcat(TinyLongcatConfig(seed=cfg_seed))
    starved = choice("starved", list(range(WORLD)))
    cases = [
        {
            "seed": run_seed("c0"),
            "t": int(torch.randint(4, 9, (1,), generator=g)),
            "layer": 0,
            "only_zero": [],
        },
        {"seed": run_seed("c2"), "t": 1, "layer": 2, "only_zero": []},
        {
            "seed": run_seed("c1"),
            "t": 3,
            "layer": 1,
            "only_zero": [starved],
        },  # a rank with nothing to dispatch
    ]
    ids_model = [
        torch.randint(
            0, m.cfg.vocab_size, (1, int(torch.randint(3, 7, (1,), generator=g))), generator=g
        ).tolist()
        for _ in range(WORLD)
    ]
    values, res = ranks("ep", cases, {"seed": cfg_seed, "ids": ids_model}, file_hint="ep_moe.py: ep_moe()")
    worst = 0.0
    pairs_real = pairs_all = 0
    for c_i, c in enumerate(cases):
        rows_got = [0] * m.cfg.n_routed
        for r in range(WORLD):
            x, ids, w = moe_case(c["seed"] + 7919 * r, c["t"], m.cfg, r in c["only_zero"])
            ref = m.moe(c["layer"], x, ids, w)
            got = values[r]["cases"][c_i]
            err = max_err(got, ref)
            worst = max(worst, err)
            where = msg(
                f"rank {r}, {c['t']} tokens, routing {ids.tolist()} (ids >= {m.cfg.n_routed} are zero experts)",
                f"第 {r} 号进程，{c['t']} 个 token，路由 {ids.tolist()}（编号 >= {m.cfg.n_routed} 的是零专家）",
            )
            if err > TOL:
                for name, out in variants(m, c["layer"], x, ids, w).items():
                    if max_err(got, out) <= TOL:
                        raise Failure(
                            msg(f"On {where}: {NAMES[name]}.", f"在{where}上：{NAMES[name]}。"), [FIX]
                        )
                raise Failure(
                    msg(
                        f"On {where}: the output differs from the single-process MoE (max error {err:.3g}).",
                        f"在{where}上：输出与单进程 MoE 不一致（最大误差 {err:.3g}）。",
                    ),
                    [FIX],
                )
            real = ids < m.cfg.n_routed
            pairs_real += int(real.sum())
            pairs_all += ids.numel()
            for e, n in enumerate(values[r]["rows"][c_i]):
                rows_got[e] += int(n)
        want_c = [0] * m.cfg.n_routed
        for r in range(WORLD):
            _, ids, _ = moe_case(c["seed"] + 7919 * r, c["t"], m.cfg, r in c["only_zero"])
            for e in ids[ids < m.cfg.n_routed].tolist():
                want_c[e] += 1
        if rows_got != want_c:
            e = next(i for i in range(m.cfg.n_routed) if rows_got[i] != want_c[i])
            raise Failure(
                msg(
                    f"Expert {e} computed {rows_got[e]} rows, but {want_c[e]} token-expert pairs chose it: each routed pair must reach its expert exactly once.",
                    f"专家 {e} 计算了 {rows_got[e]} 行，但选择它的 (token, 专家) 对有 {want_c[e]} 个：每个路由对必须恰好到达它的专家一次。",
                ),
                [FIX],
            )
    # the whole model: DP attention on each rank, EP MoE across them
    for r in range(WORLD):
        ids = torch.tensor(ids_model[r])
        err = max_err(values[r]["logits"], m.forward(ids))
        if err > 1e-3:
            raise Failure(
                msg(
                    f"ep_moe() matches on its own but the tiny model's logits on rank {r} differ (max error {err:.3g}).",
                    f"ep_moe() 单独测试正确，但第 {r} 号进程上微型模型的 logits 不一致（最大误差 {err:.3g}）。",
                ),
                [FIX],
            )
    # dispatch volume over the whole run: only the routed pairs' tokens may travel
    model_real = model_all = 0
    for r in range(WORLD):
        trace: list[torch.Tensor] = []

        def rec(
            layer: int, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, trace: list[torch.Tensor] = trace
        ) -> torch.Tensor:
            trace.append(ids)
            return m.moe(layer, x, ids, w)

        m.forward(torch.tensor(ids_model[r]), moe=rec)
        model_real += sum(int((t < m.cfg.n_routed).sum()) for t in trace)
        model_all += sum(t.numel() for t in trace)
    calls, elems = a2a_elements(res)
    d = m.cfg.d_model
    real, every = pairs_real + model_real, pairs_all + model_all
    if calls == 0:
        raise Failure(
            msg(
                "The tokens never went through dist.all_to_all / all_to_all_single: dispatch each token to the rank of its expert and combine the results back with all-to-all.",
                "token 没有经过 dist.all_to_all / all_to_all_single：要用 all-to-all 把每个 token 分发到它的专家所在进程，再把结果合并回来。",
            ),
            [FIX],
        )
    bound = 2 * real * (d + 2) + 4 * every + 2 * WORLD * calls
    if elems > bound:
        extra = (elems - 2 * real * d) / (2 * d)
        raise Failure(
            msg(
                f"The all-to-alls moved {elems} elements: about {extra:.0f} token rows more than the {real} routed token-expert pairs need "
                f"(there were {every - real} zero-expert picks). Zero experts dispatched: a zero expert's w * x is computed where the token lives, with no dispatch.",
                f"all-to-all 一共传输了 {elems} 个元素：比 {real} 个路由 (token, 专家) 对所需多出约 {extra:.0f} 行 token"
                f"（零专家选择共 {every - real} 个）。零专家被分发了：零专家的 w * x 应在 token 所在进程计算，不需要分发。",
            ),
            [FIX],
        )
    return msg(
        f"Expert-parallel MoE on {WORLD} processes equals the single-process MoE (max error {worst:.2g}) and the tiny model's logits; "
        f"{real} routed pairs dispatched, {every - real} zero-expert picks kept local ({elems} elements in {calls} all-to-all calls).",
        f"{WORLD} 个进程上的专家并行 MoE 与单进程 MoE 一致（最大误差 {worst:.2g}），微型模型 logits 也一致；"
        f"分发了 {real} 个路由对，{every - real} 个零专家选择留在本地（{calls} 次 all-to-all 共 {elems} 个元素）。",
    ), {"max_error": worst, "a2a_elements": elems, "zero_picks": every - real}


if __name__ == "__main__":
    main(check)
