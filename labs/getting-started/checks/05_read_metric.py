"""Step 5: metric.txt holds the decode_step_ms that measure.py prints (the checker reruns it).

The checker runs the lab's own ``starter/measure.py`` (a trusted copy: the lab folder is read-only
and never the workspace), with ``python -I`` so nothing in the workspace or the environment is
imported: an attendee who edits their ``measure.py`` to print a figure of their choosing cannot make
that figure pass (tests/labs/test_trusted_measure.py)."""

import re
import sys
from pathlib import Path

from labkit.check import Failure, main, msg, run_script

TRUSTED = Path(__file__).resolve().parent.parent / "starter" / "measure.py"


def check() -> tuple[str, dict[str, float]]:
    res = run_script([sys.executable, "-I", str(TRUSTED)], timeout=60)
    found = re.search(r"^decode_step_ms = ([0-9.]+)$", res.stdout, re.M)
    if res.exit_code != 0 or not found:
        raise Failure(
            msg(
                f"measure.py did not print decode_step_ms (exit {res.exit_code}): {res.stderr[-300:]}",
                f"measure.py 没有打印 decode_step_ms（退出码 {res.exit_code}）：{res.stderr[-300:]}",
            ),
            [
                msg(
                    "Did you change measure.py? Reset the lab to get it back.",
                    "你改过 measure.py 吗？可以重置实验恢复它。",
                )
            ],
        )
    want = float(found.group(1))
    path = Path("metric.txt")
    if not path.is_file():
        raise Failure(msg("`metric.txt` does not exist yet.", "还没有 `metric.txt` 文件。"))
    text = path.read_text().strip()
    try:
        got = float(text)
    except ValueError as exc:
        raise Failure(
            msg(
                f"`metric.txt` should hold just a number, not {text[:40]!r}.",
                f"`metric.txt` 里只应有一个数字，而不是 {text[:40]!r}。",
            )
        ) from exc
    if abs(got - want) > 1e-3 * max(1.0, abs(want)):
        raise Failure(
            msg(
                f"`metric.txt` says {got}, but measure.py prints decode_step_ms = {want}.",
                f"`metric.txt` 写的是 {got}，但 measure.py 打印的是 decode_step_ms = {want}。",
            )
        )
    return msg(
        f"Right: one emulated decode step takes {want} ms on the 910B profile.",
        f"正确：在 910B 配置下一次仿真 decode 步耗时 {want} ms。",
    ), {"decode_step_ms": want}


main(check)
