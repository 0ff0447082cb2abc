"""Step 3: notes/hello.txt holds exactly the two given lines."""

from labkit.check import expect_file, main, msg

EXPECTED = "Hello, Ascend!\n你好，昇腾！\n"


def check() -> str:
    expect_file(
        "notes/hello.txt",
        EXPECTED,
        hint=msg(
            "Two lines, each ending with a newline; the Chinese punctuation is full-width (，！).",
            "两行，每行以换行结尾；中文标点是全角的（，！）。",
        ),
    )
    return msg("notes/hello.txt is exactly right.", "notes/hello.txt 完全正确。")


main(check)
