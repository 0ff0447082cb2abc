"""Step 3: notes/hello.txt holds exactly the two given lines (UTF-8, LF, a final newline).

The check compares bytes and, when they differ, says which of the usual slips it is: ASCII
punctuation for the full-width Chinese one, no final newline, an extra or missing line, Windows
line ends, a byte-order mark, spaces at the end of a line."""

from pathlib import Path

from labkit.check import Failure, main, msg

LINES = ["Hello, Ascend!", "你好，昇腾！"]
EXPECTED = ("\n".join(LINES) + "\n").encode("utf-8")
HINT = msg(
    "Two lines, each ending with a newline; the Chinese line uses full-width punctuation (，！).",
    "两行，每行以换行结尾；中文那一行用全角标点（，！）。",
)


def diagnose(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        return msg(
            "The file starts with a byte-order mark (BOM): save it as plain UTF-8.",
            "文件开头有字节顺序标记（BOM）：请保存为不带 BOM 的 UTF-8。",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return msg("The file is not UTF-8 text: save it as UTF-8.", "文件不是 UTF-8 文本：请保存为 UTF-8。")
    if "\r" in text:
        return msg(
            "The lines end with Windows line ends (\\r\\n): use plain newlines (\\n).",
            "行尾是 Windows 换行（\\r\\n）：请使用普通换行（\\n）。",
        )
    lines = text.split("\n")
    if lines[-1] == "":
        lines = lines[:-1]
    elif lines[:2] == LINES and len(lines) == 2:
        return msg(
            "The two lines are right, but the last one does not end with a newline.",
            "两行内容都对，但最后一行没有以换行结尾。",
        )
    if len(lines) > 2 and lines[:2] == LINES:
        extra = "an empty line" if all(not s.strip() for s in lines[2:]) else repr(lines[2])
        extra_zh = "空行" if all(not s.strip() for s in lines[2:]) else repr(lines[2])
        return msg(
            f"The file has {len(lines)} lines: after the two asked for comes {extra}. Keep exactly two.",
            f"文件有 {len(lines)} 行：要求的两行之后还有{extra_zh}。只保留这两行。",
        )
    if len(lines) < 2:
        return msg(
            f"The file has {len(lines)} line(s); it needs two: {LINES[0]!r} and {LINES[1]!r}.",
            f"文件只有 {len(lines)} 行；需要两行：{LINES[0]!r} 和 {LINES[1]!r}。",
        )
    for i, (got, want) in enumerate(zip(lines, LINES, strict=False), start=1):
        if got == want:
            continue
        if got.rstrip() == want:
            return msg(f"Line {i} has spaces at its end.", f"第 {i} 行末尾有空格。")
        ascii_form = want.replace("，", ",").replace("！", "!")
        if i == 2 and got != want and got.replace("，", ",").replace("！", "!") == ascii_form:
            return msg(
                f"Line 2 is {got!r}: the Chinese line uses full-width punctuation, ， and ！, not the ASCII , and !.",
                f"第 2 行是 {got!r}：中文这一行用全角标点 ，和 ！，不是半角的 , 和 !。",
            )
        if got.lower() == want.lower():
            return msg(
                f"Line {i} is {got!r}: mind the capitals, {want!r}.",
                f"第 {i} 行是 {got!r}：注意大小写，应为 {want!r}。",
            )
        return msg(f"Line {i} is {got!r}, expected {want!r}.", f"第 {i} 行是 {got!r}，应为 {want!r}。")
    return msg("The file has more than the two lines asked for.", "文件里不止要求的两行。")


def check() -> str:
    path = Path("notes/hello.txt")
    if not path.is_file():
        where = (
            msg(" (it must be in the notes folder)", "（它应在 notes 文件夹里）")
            if Path("hello.txt").exists()
            else ""
        )
        raise Failure(
            msg(
                f"`notes/hello.txt` does not exist in your lab folder{where}.",
                f"你的实验文件夹中没有 `notes/hello.txt`{where}。",
            ),
            [HINT],
        )
    data = path.read_bytes()
    if data != EXPECTED:
        raise Failure(diagnose(data), [HINT])
    return msg("notes/hello.txt is exactly right.", "notes/hello.txt 完全正确。")


main(check)
