"""JSON from attendees, parsed with limits that give a clear error instead of a crash: nesting at
most :data:`MAX_DEPTH` deep (Python's parser raises ``RecursionError`` near 1000, or worse, deeper
inside whatever walks the result), numbers at most :data:`MAX_DIGITS` digits (Python refuses
integers over 4300 digits with a bare ``ValueError``). :func:`loads` raises :class:`JSONLimitError`
(a ``ValueError``) with a message for people; :func:`explain` words the same for an exception
FastAPI met while parsing a request body."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64
MAX_DIGITS = 100

_TOKENS = re.compile(rb'[\[\]{}"\\]')
_NUMBER = re.compile(rb"-?\d{%d,}" % (MAX_DIGITS + 1))


class JSONLimitError(ValueError):
    pass


def depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in ``raw``, outside strings (no full parse)."""
    deepest = level = 0
    in_string = False
    skip = -1
    for m in _TOKENS.finditer(raw):
        pos = m.start()
        if pos == skip:
            continue
        ch = raw[pos]
        if in_string:
            if ch == 0x5C:  # backslash: the next byte is escaped
                skip = pos + 1
            elif ch == 0x22:
                in_string = False
        elif ch == 0x22:
            in_string = True
        elif ch in (0x5B, 0x7B):
            level += 1
            deepest = max(deepest, level)
        elif ch in (0x5D, 0x7D):
            level -= 1
    return deepest


def _strip_strings(raw: bytes) -> bytes:
    return re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', raw, flags=re.S)


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` with the limits above (``JSONDecodeError`` for broken JSON as usual)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if depth(data) > max_depth:
        raise JSONLimitError(f"it is nested too deep (at most {max_depth} levels of [ ] and {{ }})")
    if _NUMBER.search(_strip_strings(data)):
        raise JSONLimitError(f"it holds a number with more than {MAX_DIGITS} digits")
    try:
        return json.loads(data)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise JSONLimitError("it is nested too deep") from None


def explain(exc: BaseException | None) -> str | None:
    """A message for people when ``exc`` (what FastAPI caught parsing a JSON body) broke a limit."""
    if isinstance(exc, RecursionError):
        return "The JSON body is nested too deep: send a flatter document."
    if isinstance(exc, ValueError) and "digits" in str(exc):
        return "The JSON body holds a number with too many digits (4300 at most): send a shorter number."
    return None
