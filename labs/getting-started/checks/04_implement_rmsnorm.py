"""Step 4: rmsnorm.rms_norm matches the npu_rms_norm definition on inputs the attendee has not seen.

The cases (checks/rmsnorm_judge.py) are drawn from ``LAB_RUN_ID`` plus fixed boundary cases; the
attendee's function runs in a child process (checks/rmsnorm_harness.py), which also notices a
``rms_norm`` that calls a library RMSNorm instead of computing it."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # this folder, not the attendee's

from labkit.check import Failure, main, msg, run_function  # noqa: E402
from rmsnorm_judge import judge, make_cases  # noqa: E402


def run_seed() -> int:
    run_id = os.environ.get("LAB_RUN_ID") or os.urandom(8).hex()
    return int(hashlib.sha256(f"getting-started/rmsnorm/{run_id}".encode()).hexdigest()[:8], 16)


def check() -> tuple[str, dict[str, float]]:
    if not Path("rmsnorm.py").is_file():
        raise Failure(
            msg(
                "`rmsnorm.py` is missing: reset the lab to get it back.",
                "缺少 `rmsnorm.py`：可以重置实验恢复它。",
            )
        )
    cases = make_cases(run_seed())
    outcome = run_function(
        HERE / "rmsnorm_harness.py", "run_cases", [c.payload() for c in cases], timeout=60
    ).unwrap(
        msg(
            "Open rmsnorm.py and replace the `raise NotImplementedError` with your code.",
            "打开 rmsnorm.py，把 `raise NotImplementedError` 换成你的实现。",
        )
    )
    problem, worst = judge(cases, outcome)
    if problem:
        if "NotImplementedError" in problem:
            raise Failure(
                msg(
                    "rms_norm is not written yet (it raises NotImplementedError).",
                    "rms_norm 还没有实现（它抛出 NotImplementedError）。",
                ),
                [
                    msg(
                        "Open rmsnorm.py and replace the `raise NotImplementedError` with your code.",
                        "打开 rmsnorm.py，把 `raise NotImplementedError` 换成你的实现。",
                    )
                ],
            )
        raise Failure(problem)
    return msg(
        f"Your RMSNorm matches npu_rms_norm on {len(cases)} inputs you had not seen "
        "(fp32, bf16, fp16, 1-D to 3-D, eps from 1e-6 to 0.5).",
        f"你的 RMSNorm 在 {len(cases)} 组你没见过的输入上与 npu_rms_norm 一致"
        "（fp32、bf16、fp16，一到三维，eps 从 1e-6 到 0.5）。",
    ), {"max_abs_error": worst, "cases": float(len(cases))}


main(check)
