"""Step 5: metric.txt holds the decode_step_ms that measure.py prints (the checker reruns it).

The checker runs the lab's own ``starter/measure.py`` (a trusted copy: the lab folder is read-only
and never the workspace), with ``python -I`` so nothing in the workspace or the environment is
imported: an attendee who edits their ``measure.py`` to print a figure of their choosing cannot make
that figure pass (tests/labs/test_trusted_measure.py). The figure is emulated, so it is the same on
every machine; when metric.txt is wrong the checker says which other figure it is (another row of
the table, a figure from the talk, a rounded or a microsecond value, an edited measure.py)."""

import re
import sys
from pathlib import Path

from labkit.check import Failure, main, msg, run_script

TRUSTED = Path(__file__).resolve().parent.parent / "starter" / "measure.py"
# printed with 4 decimals; "0.384" is accepted, "0.38" is not
TOLERANCE_MS = 5.1e-4
# decode figures of the talks an attendee may copy instead (reference/talks-and-hardware.md)
TALK = {
    293.0: ("Hy3 on A3, eager decode, 293 ms/token", "Hy3 在 A3 上 eager 模式 decode，293 ms/token"),
    246.0: ("Hy3 on A3 with fused ops, 246 ms/token", "Hy3 在 A3 上用融合算子后，246 ms/token"),
    33.3: ("Hy3 on A3 in graph mode, 33.3 ms/token", "Hy3 在 A3 上图模式，33.3 ms/token"),
    103.18: (
        "the Hy3 decode step on Ascend 950 before the agent's optimisations, 103.18 ms",
        "昇腾 950 上 Hy3 在智能体优化之前的 decode 步，103.18 ms",
    ),
    17.98: (
        "the Hy3 decode step on Ascend 950 after them, 17.98 ms",
        "昇腾 950 上 Hy3 优化之后的 decode 步，17.98 ms",
    ),
}
ROW = re.compile(r"^(\S+)\s+(eager|graph)\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)$", re.M)
LINE = re.compile(r"^decode_step_ms = ([0-9.]+)$", re.M)


def measure(argv: list[str]) -> tuple[float | None, dict[str, float], str]:
    res = run_script(argv, timeout=40)
    found = LINE.search(res.stdout)
    rows = {f"{p} {m}": float(v) for p, m, v in ROW.findall(res.stdout)}
    return (float(found.group(1)) if res.ok and found else None), rows, res.stderr[-300:]


def diagnose(got: float, want: float, rows: dict[str, float]) -> str:
    for name, value in rows.items():
        if name != "910B eager" and abs(got - value) <= TOLERANCE_MS:
            return msg(
                f"{got} is the {name} row of the table; the step asks for one decode step on the 910B in eager "
                f"mode, the `decode_step_ms =` line ({want}).",
                f"{got} 是表格中 {name} 那一行；这一步要的是 910B 在 eager 模式下一次 decode 的耗时，"
                f"即 `decode_step_ms =` 那一行（{want}）。",
            )
    for value, (what, what_zh) in TALK.items():
        if abs(got - value) < 1e-6 * max(1.0, value):
            return msg(
                f"{got} is a figure from the talk ({what}), not what measure.py measures for this toy model "
                f"here ({want}): write the number measure.py prints.",
                f"{got} 是分享中的数字（{what_zh}），不是 measure.py 在这里为这个小模型测出的值（{want}）："
                "请写 measure.py 打印的数字。",
            )
    if abs(got - want * 1000) <= TOLERANCE_MS * 1000:
        return msg(
            f"{got} looks like microseconds; metric.txt wants milliseconds, as printed: {want}.",
            f"{got} 看起来是微秒；metric.txt 要的是毫秒，即打印出来的 {want}。",
        )
    if abs(got - want) <= max(0.05 * want, 0.051):
        return msg(
            f"metric.txt says {got}, measure.py prints {want}: the figure was rounded. Copy every digit "
            f"printed (the check compares to {TOLERANCE_MS * 1000:.1f} µs).",
            f"metric.txt 写的是 {got}，measure.py 打印的是 {want}：数字被四舍五入了。请把打印出的数字全部抄上"
            f"（检查精度为 {TOLERANCE_MS * 1000:.1f} 微秒）。",
        )
    return ""


def check() -> tuple[str, dict[str, float]]:
    want, rows, err = measure([sys.executable, "-I", str(TRUSTED)])
    if want is None:
        raise Failure(
            msg(
                f"The lab's measure.py did not print decode_step_ms: {err}",
                f"实验自带的 measure.py 没有打印 decode_step_ms：{err}",
            )
        )
    path = Path("metric.txt")
    if not path.is_file():
        raise Failure(
            msg("`metric.txt` does not exist yet.", "还没有 `metric.txt` 文件。"),
            [
                msg(
                    "Run `python measure.py` and copy the number after `decode_step_ms =`.",
                    "运行 `python measure.py`，复制 `decode_step_ms =` 后面的数字。",
                )
            ],
        )
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    number = re.sub(r"\s*ms$", "", text)
    try:
        got = float(number)
    except ValueError as exc:
        raise Failure(
            msg(
                f"`metric.txt` should hold just a number (milliseconds), not {text[:40]!r}.",
                f"`metric.txt` 里只应有一个数字（毫秒），而不是 {text[:40]!r}。",
            )
        ) from exc
    if abs(got - want) > TOLERANCE_MS:
        why = diagnose(got, want, rows)
        if not why and Path("measure.py").is_file():
            theirs, _, _ = measure([sys.executable, "measure.py"])
            if theirs is not None and abs(theirs - got) <= TOLERANCE_MS:
                why = msg(
                    f"Your measure.py prints {theirs}, the lab's prints {want}: your copy was changed. The check "
                    "runs the lab's own measure.py; reset the lab (or undo your change) and copy its figure.",
                    f"你的 measure.py 打印的是 {theirs}，实验自带的打印的是 {want}：你的副本被改过。"
                    "检查器运行的是实验自带的 measure.py；请重置实验（或撤销修改），再抄它打印的数字。",
                )
        raise Failure(
            why
            or msg(
                f"`metric.txt` says {got}, but measure.py prints decode_step_ms = {want}.",
                f"`metric.txt` 写的是 {got}，但 measure.py 打印的是 decode_step_ms = {want}。",
            )
        )
    return msg(
        f"Right: one emulated decode step of this model takes {want} ms on the 910B in eager mode; "
        f"the launches, not the weights, take most of it.",
        f"正确：在 910B 的 eager 模式下，这个模型一次仿真 decode 步耗时 {want} ms，大部分时间花在算子下发上，而不是读权重。",
    ), {"decode_step_ms": want}


main(check)
