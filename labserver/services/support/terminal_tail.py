"""The last lines of a terminal as plain text, for the gallery's thumbnails (pure, no I/O).

``last_lines(output, rows, cols)`` reads only the end of a terminal's output (``WINDOW`` bytes of
the scrollback), so its cost per call is bounded whatever the shell printed: a shell that prints
1 MB/s costs the same as one that prints a line a minute. It interprets what a shell and its
line editor use: text, ``\\r`` (the line is overwritten from its start: progress bars), ``\\n``,
``\\b``, tabs, erase in line (``ESC [ K``, used by readline's redraws), cursor left/right on the
line, and clear screen (``ESC [ 2J``, ``ESC c``: what ``clear`` prints; lines before it are gone).
Every other escape sequence (colours, OSC titles and prompt marks, cursor moves between lines)
is dropped, so a full-screen program (vim, top) shows as the text it drew, not as its screen:
a thumbnail is a glance, the read-only live view is the real terminal.

Attendee output is hostile: nothing here can grow without bound (the window, ``rows`` lines of at
most ``MAX_LINE`` characters, each cut to ``cols`` at the end) and every character that is not
printable is dropped, so a thumbnail never carries a control character to the page."""

from __future__ import annotations

import re

WINDOW = 8 * 1024  # bytes of output read from the end of the scrollback
MAX_LINE = 512  # characters a line keeps while it is being written (cursor moves stay inside)

_TOKEN = re.compile(
    r"\x1b\[([0-?]*)[ -/]*([@-~])"  # CSI: parameters, final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (title, prompt marks), ended by BEL or ST
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b(.)?"  # any other escape (two characters)
    r"|([\r\n\b\t])"
    r"|[\x00-\x1f\x7f-\x9f]"  # other control characters: dropped
    r"|([^\x00-\x1f\x7f-\x9f\x1b]+)",  # text
    re.DOTALL,
)


class _Screen:
    """Lines and a cursor on the last one: the part of a terminal a shell's output moves."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.lines: list[str] = []
        self.line: list[str] = []
        self.col = 0

    def text(self, s: str) -> None:
        line, col = self.line, self.col
        if col >= MAX_LINE:
            return
        s = s[: MAX_LINE - col]
        if col == len(line):
            line.extend(s)
        else:
            if col > len(line):
                line.extend(" " * (col - len(line)))
            line[col : col + len(s)] = list(s)
        self.col = col + len(s)

    def newline(self) -> None:
        self.lines.append("".join(self.line).rstrip())
        if len(self.lines) > self.rows:
            del self.lines[: len(self.lines) - self.rows]
        self.line, self.col = [], 0

    def csi(self, params: str, final: str) -> None:
        n = int(params) if params.isdigit() else 0
        if final == "K":  # erase in line: 0 to the end, 1 to the cursor, 2 all
            if n == 0:
                del self.line[self.col :]
            elif n == 1:
                self.line[: self.col] = [" "] * min(self.col, len(self.line))
            else:
                self.line = []
        elif final == "J" and n in (2, 3):
            self.clear()
        elif final == "D":
            self.col = max(0, self.col - max(1, n))
        elif final == "C":
            self.col = min(MAX_LINE, self.col + max(1, n))
        elif final == "G":
            self.col = min(MAX_LINE, max(0, n - 1))

    def clear(self) -> None:
        self.lines, self.line, self.col = [], [], 0

    def result(self, cols: int) -> list[str]:
        last = "".join(self.line).rstrip()
        out = [*self.lines, last] if last or not self.lines else list(self.lines)
        return [line[:cols] for line in out[-self.rows :]]


def _window_text(output: bytes | bytearray) -> str:
    """The last :data:`WINDOW` bytes as text. The window may begin inside a line, an escape or a
    character: it starts after the first newline when that is near, else after any cut character;
    a character still incomplete at the end (a read ends inside it) is left for the next time."""
    tail = bytes(output[-WINDOW:])
    if len(output) > WINDOW:
        cut = tail.find(b"\n", 0, WINDOW // 2)
        start = cut + 1 if cut >= 0 else 0
        while start < len(tail) and start < 4 and 0x80 <= tail[start] < 0xC0:
            start += 1
        tail = tail[start:]
    end = len(tail)
    for back in range(1, min(4, end) + 1):  # an incomplete UTF-8 sequence at the very end
        byte = tail[end - back]
        if byte < 0x80:
            break
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if back < need:
                tail = tail[: end - back]
            break
    return tail.decode("utf-8", errors="replace")


def last_lines(output: bytes | bytearray, rows: int = 10, cols: int = 80) -> list[str]:
    """The last ``rows`` lines (each at most ``cols`` characters) that ``output`` leaves on a
    terminal, as plain printable text; only the last :data:`WINDOW` bytes are read."""
    screen = _Screen(rows)
    for m in _TOKEN.finditer(_window_text(output)):
        text, ctl = m.group(5), m.group(4)
        if text is not None:
            screen.text(text)
        elif ctl is not None:
            if ctl == "\n":
                screen.newline()
            elif ctl == "\r":
                screen.col = 0
            elif ctl == "\b":
                screen.col = max(0, screen.col - 1)
            else:  # tab
                screen.text(" " * (8 - screen.col % 8))
        elif m.group(2) is not None:
            screen.csi(m.group(1), m.group(2))
        elif m.group(3) == "c":  # ESC c: full reset
            screen.clear()
    return screen.result(cols)
