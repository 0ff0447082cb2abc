"""Step 1: device.txt names the device labkit picks in this environment (its `kind`).

The environment's kind is ``LAB_DEVICE``, set by the server from where the environment runs: a
check may run in a grader beside it that holds no card (an NPU card is never shared), where labkit
itself would pick CPU emulation. Without it (a laptop) it is what labkit picks here."""

import os
import re
from pathlib import Path

from labkit.check import Failure, main, msg
from labkit.device import describe

HINT = msg(
    "Run `python device_info.py` and copy the value after `kind: ` (only the value, on one line).",
    "运行 `python device_info.py`，复制 `kind: ` 后面的值（只写这个值，一行）。",
)


def diagnose(got: str, info: dict[str, object]) -> str:
    """Why ``got`` is not ``info["kind"]``, in the attendee's terms."""
    kind = str(info["kind"])
    if not got:
        return msg("`device.txt` is empty.", "`device.txt` 是空的。")
    if "\n" in got:
        return msg(
            f"`device.txt` has {len(got.splitlines())} lines; write only the kind ({kind}), on one line.",
            f"`device.txt` 有 {len(got.splitlines())} 行；只写设备类型（{kind}），一行。",
        )
    if re.match(r"^\s*kind\s*[:=]", got):
        return msg(
            f"`device.txt` holds the whole line {got!r}: write only the value, without the `kind:` prefix.",
            f"`device.txt` 写的是整行 {got!r}：只写值，不要 `kind:` 前缀。",
        )
    if got[:1] in "\"'`" or got[-1:] in "\"'`":
        return msg(
            f"`device.txt` holds {got!r}: write the kind without quotes.",
            f"`device.txt` 写的是 {got!r}：设备类型不要加引号。",
        )
    if got.lower() == kind.lower():
        return msg(
            f"`device.txt` holds {got!r}: the kind is lower case, {kind!r}.",
            f"`device.txt` 写的是 {got!r}：设备类型是小写的 {kind!r}。",
        )
    for key in ("device", "name", "profile"):
        if str(info.get(key)) == got:
            return msg(
                f"`device.txt` holds {got!r}, the `{key}` line of device_info.py; the step asks for the `kind` line ({kind}).",
                f"`device.txt` 写的是 {got!r}，这是 device_info.py 的 `{key}` 行；这一步要的是 `kind` 行（{kind}）。",
            )
    if got in ("npu", "cpu-emu"):
        return msg(
            f"`device.txt` says {got!r}, but labkit picked {kind!r} in this environment: the file comes from "
            "another machine or an earlier guess. Run device_info.py here.",
            f"`device.txt` 写的是 {got!r}，但 labkit 在这个环境里选择的是 {kind!r}：这个文件来自别的机器或是猜的。"
            "请在这里运行 device_info.py。",
        )
    return msg(
        f"`device.txt` says {got!r}, but labkit picked {kind!r} here.",
        f"`device.txt` 写的是 {got!r}，但 labkit 在这里选择的是 {kind!r}。",
    )


def environment() -> dict[str, object]:
    """``describe()`` of the attendee's environment (the module docstring)."""
    info = describe()
    kind = os.environ.get("LAB_DEVICE", "")
    kind = "npu" if kind.startswith("npu") else kind  # the server sets npu:0 (the card, logically)
    if kind in ("npu", "cpu-emu") and kind != info["kind"]:
        info = {"kind": kind, "name": "an Ascend NPU" if kind == "npu" else "CPU emulation"}
    return info


def check() -> str:
    info = environment()
    path = Path("device.txt")
    if not path.is_file():
        raise Failure(msg("`device.txt` does not exist yet.", "还没有 `device.txt` 文件。"), [HINT])
    got = path.read_text(encoding="utf-8", errors="replace").strip()
    if got != info["kind"]:
        raise Failure(diagnose(got, info), [HINT])
    return msg(
        f"Right: this environment runs on {info['kind']} ({info['name']}).",
        f"正确：这个环境运行在 {info['kind']} 上（{info['name']}）。",
    )


main(check)
