"""Step 2: recurrent_kda equals the fp64 golden on held-out inputs, with an fp32 state even when
the inputs are bf16."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kdacheck as kc  # noqa: E402
import torch  # noqa: E402
from labkit.check import Failure, main, msg  # noqa: E402

HINT = msg(
    "Per token: decay the state by exp(g_t) first, then delta = v_t - k_t S, then S += beta_t k_t (x) delta, and only then "
    "o_t = scale q_t S. Keep S (and o) in fp32.",
    "每个 token：先用 exp(g_t) 衰减状态，再算 delta = v_t - k_t S，再 S += beta_t k_t (x) delta，最后才算 o_t = scale q_t S。"
    "S（以及 o）保持 fp32。",
)


def check() -> tuple[str, dict[str, float]]:
    s = kc.run_seed("recurrent")
    err = 0.0
    for label, H, T, bf16 in (("fp32", 2, 40 + s % 50, False), ("bf16", 3, 33, True), ("T=1", 1, 1, False)):
        x, x32 = kc.inputs(s + T, H, T)
        if bf16:  # the op's inputs in bf16; the golden sees the same rounded values
            x32 = {n: (t.to(torch.bfloat16) if n != "s0" else t) for n, t in x32.items()}
            x = {n: t.double() for n, t in x32.items()}
        ref_o, ref_s = kc.golden(x)
        scale = x["q"].shape[-1] ** -0.5
        o, S = kc.call(
            "kda_recurrent.py",
            "recurrent_kda",
            x32["q"],
            x32["k"],
            x32["v"],
            x32["g"],
            x32["beta"],
            x32["s0"],
            scale,
            hint=HINT,
        )
        what = msg(
            f"recurrent_kda ({label} inputs, H={H}, T={T})", f"recurrent_kda（{label} 输入，H={H}，T={T}）"
        )
        for name, t in (("S", S), ("o", o)):
            if isinstance(t, torch.Tensor) and t.dtype != torch.float32:
                raise Failure(
                    msg(
                        f"{what}: `{name}` is {str(t.dtype).replace('torch.', '')}; the state and the output must be fp32 "
                        "(the state accumulates over every token: bf16 loses it).",
                        f"{what}：`{name}` 是 {str(t.dtype).replace('torch.', '')}；状态和输出必须是 fp32（状态在每个 token 上累积，bf16 会丢失精度）。",
                    ),
                    [HINT],
                )
        err = max(err, kc.compare("o", o, ref_o, what, HINT), kc.compare("S", S, ref_s, what, HINT))
    return (
        msg(
            f"recurrent_kda equals the fp64 golden (max abs error {err:.2g}, tolerance {kc.kdaref.TOL:g} x max |o|), fp32 state "
            "also from bf16 inputs.",
            f"recurrent_kda 与 fp64 参考一致（最大绝对误差 {err:.2g}，容差 {kc.kdaref.TOL:g} x max |o|），bf16 输入时状态也是 fp32。",
        ),
        {"max_abs_error": err},
    )


main(check)
