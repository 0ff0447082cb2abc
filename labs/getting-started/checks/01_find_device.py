"""Step 1: device.txt names the device labkit picks in this environment."""

from pathlib import Path

from labkit.check import Failure, main, msg
from labkit.device import get_device


def check() -> str:
    expected = get_device().kind
    path = Path("device.txt")
    if not path.is_file():
        raise Failure(
            msg("`device.txt` does not exist yet.", "还没有 `device.txt` 文件。"),
            [
                msg(
                    "Run `python device_info.py` and write the `kind` value into device.txt.",
                    "运行 `python device_info.py`，把 `kind` 的值写入 device.txt。",
                )
            ],
        )
    got = path.read_text(encoding="utf-8", errors="replace").strip()
    if got != expected:
        raise Failure(
            msg(
                f"`device.txt` says {got!r}, but labkit picked {expected!r} here.",
                f"`device.txt` 写的是 {got!r}，但 labkit 在这里选择的是 {expected!r}。",
            ),
            [
                msg(
                    "Only the kind, on one line: no quotes, no `kind:` prefix.",
                    "只写设备类型，一行：不要引号，不要 `kind:` 前缀。",
                )
            ],
        )
    return msg(f"Right: this environment runs on {expected}.", f"正确：这个环境运行在 {expected} 上。")


main(check)
