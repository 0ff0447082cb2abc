"""Step 4: rmsnorm.rms_norm matches the npu_rms_norm definition (run in a child process)."""

import torch
from labkit.check import Failure, expect_close, expect_equal, main, msg, run_function


def reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = 1.0 / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + eps)
    return (x.double() * rstd * w.double()).float(), rstd.float()


def check() -> tuple[str, dict[str, float]]:
    torch.manual_seed(1234)
    worst = 0.0
    for shape in [(4, 64), (2, 3, 128)]:
        x = torch.randn(*shape) * 3
        w = torch.rand(shape[-1]) + 0.5
        out = run_function("rmsnorm.py", "rms_norm", x, w, 1e-6, timeout=60).unwrap(
            msg(
                "Open rmsnorm.py and replace the `raise NotImplementedError` with your code.",
                "打开 rmsnorm.py，把 `raise NotImplementedError` 换成你的实现。",
            )
        )
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise Failure(
                msg(
                    f"rms_norm must return a tuple (y, rstd); it returned {type(out).__name__}.",
                    f"rms_norm 必须返回元组 (y, rstd)；实际返回的是 {type(out).__name__}。",
                )
            )
        y, rstd = out
        y_ref, rstd_ref = reference(x, w, 1e-6)
        expect_equal(
            "rstd.shape",
            tuple(rstd.shape),
            tuple(rstd_ref.shape),
            hint=msg(
                "Keep the last dimension: mean(..., dim=-1, keepdim=True).",
                "保留最后一维：mean(..., dim=-1, keepdim=True)。",
            ),
        )
        worst = max(
            worst,
            expect_close(
                "rstd",
                rstd,
                rstd_ref,
                atol=1e-4,
                rtol=1e-4,
                hint=msg(
                    "rstd = 1 / sqrt(mean(x²) + eps), mean over the last dimension.",
                    "rstd = 1 / sqrt(mean(x²) + eps)，在最后一维上求均值。",
                ),
            ),
        )
        worst = max(
            worst,
            expect_close(
                "y",
                y,
                y_ref,
                atol=1e-4,
                rtol=1e-4,
                hint=msg("y = x * rstd * weight.", "y = x * rstd * weight。"),
            ),
        )
    return msg(
        "Your RMSNorm matches npu_rms_norm's definition.", "你的 RMSNorm 与 npu_rms_norm 的定义一致。"
    ), {"max_abs_error": worst}


main(check)
