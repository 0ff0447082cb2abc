"""Step 2: warmup.json was written by running warmup.py (the checker recomputes what it must hold)."""

import json
from pathlib import Path

import torch
from labkit.check import Failure, main, msg
from labkit.device import get_device


def expected() -> dict:
    torch.manual_seed(7)
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    c = a @ b
    return {"device": get_device().kind, "shape": [64, 64], "trace": round(float(c.trace()), 4)}


def check() -> str:
    path = Path("warmup.json")
    if not path.is_file():
        raise Failure(
            msg(
                "`warmup.json` is missing: run `python warmup.py` first.",
                "缺少 `warmup.json`：请先运行 `python warmup.py`。",
            )
        )
    try:
        got = json.loads(path.read_text())
    except ValueError as exc:
        raise Failure(
            msg(
                f"`warmup.json` is not valid JSON ({exc}); run warmup.py again.",
                f"`warmup.json` 不是合法的 JSON（{exc}）；请重新运行 warmup.py。",
            )
        ) from exc
    want = expected()
    if not isinstance(got, dict) or got.get("device") != want["device"] or got.get("shape") != want["shape"]:
        raise Failure(
            msg(
                f"`warmup.json` holds {got}, but running warmup.py here gives {want}. Run it again.",
                f"`warmup.json` 的内容是 {got}，但在这里运行 warmup.py 得到的是 {want}。请重新运行。",
            )
        )
    trace = got.get("trace")
    if not isinstance(trace, int | float) or abs(trace - want["trace"]) > 1e-2 * max(1.0, abs(want["trace"])):
        raise Failure(
            msg(
                f"The trace in `warmup.json` is {trace}, expected {want['trace']}. Was it edited by hand?",
                f"`warmup.json` 中的迹是 {trace}，应为 {want['trace']}。是手动改过吗？",
            )
        )
    return msg(
        f"warmup.py ran on {want['device']}: trace {want['trace']}.",
        f"warmup.py 在 {want['device']} 上运行成功：迹为 {want['trace']}。",
    )


main(check)
