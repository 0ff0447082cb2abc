"""The thumbnail's text: what a shell's output leaves on the last lines, as printable text only."""

from __future__ import annotations

from labserver.services.support.terminal_tail import WINDOW, last_lines


def test_plain_lines_keep_the_last_rows_cut_to_cols() -> None:
    out = b"".join(b"line %d %s\r\n" % (i, b"x" * 100) for i in range(30))
    lines = last_lines(out, rows=4, cols=20)
    assert lines == [f"line {i} {'x' * 100}"[:20] for i in range(26, 30)]


def test_carriage_return_and_erase_in_line_overwrite_like_a_terminal() -> None:
    progress = b"fetch  10%\rfetch  55%\rfetch 100%\r\n"
    readline = b"lab$ ls -l\r\x1b[Klab$ pwd\r\n/workspace/demo\r\nlab$ "  # a redraw after history
    assert last_lines(progress + readline, rows=5) == ["fetch 100%", "lab$ pwd", "/workspace/demo", "lab$"]


def test_colours_titles_prompt_marks_and_controls_are_dropped() -> None:
    out = (
        b"\x1b]0;title\x07\x1b[1;32mgreen\x1b[0m \x1b]133;B\x07ok\x07\x01\x7f"
        + "\u009b\u0085".encode()
        + b"\r\n"
    )
    lines = last_lines(out)
    assert lines == ["green ok"]
    assert all(ch.isprintable() for line in lines for ch in line)


def test_clear_screen_forgets_what_came_before() -> None:
    assert last_lines(b"old\r\nstuff\r\n\x1b[H\x1b[2Jfresh\r\n$ ") == ["fresh", "$"]
    assert last_lines(b"old\r\n\x1bcnew") == ["new"]


def test_backspace_and_tab() -> None:
    assert last_lines(b"abd\bc\r\na\tb") == ["abc", "a       b"]


def test_only_the_end_is_read_and_a_split_character_never_shows() -> None:
    """1 MB of output costs one window; the window's first, possibly cut, line is skipped."""
    big = "中".encode() * 400_000 + b"\r\nlast line\r\n"
    assert len(big) > 100 * WINDOW
    assert last_lines(big, rows=2, cols=10) == ["中" * 10, "last line"]
    assert "\ufffd" not in "".join(last_lines(big[:-30], rows=3))


def test_one_endless_line_is_cut() -> None:
    lines = last_lines(b"x" * 2_000_000, rows=3, cols=80)
    assert lines == ["x" * 80]
