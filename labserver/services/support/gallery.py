"""The live gallery: every attendee's terminal as a thumbnail of its last lines, for one page.

Mechanism. A page holds one stream (``routes/instructor/gallery.py``) and that stream one
:class:`GalleryFeed`. The feed reads the terminals' scrollback that the server keeps anyway
(:class:`~labserver.terminals.sessions.TerminalHub`): it attaches no viewer and opens no shell, so a
thumbnail costs the terminal nothing and never keeps an idle shell alive. The stream calls
:meth:`GalleryFeed.poll` once per tick (:data:`INTERVAL_S`); a poll renders only the terminals whose
output changed since the last one (``TerminalSession.output_bytes``), from the end of their
scrollback (:mod:`labserver.services.support.terminal_tail`), and answers at most one update per attendee.
Whatever a shell prints, its thumbnail changes at most once per tick and each update is at most
``rows`` lines of ``cols`` characters, sent as a difference from what this page already has (a
shell printing a line a second sends one line, not the screen).

Promises: only terminals of the event's environments (``envs``, loaded from the database for the
event; an instructor's stream of one event never carries another event's terminal); at most one
update per attendee per poll; an update is ``[attendee_id, lab, drop, keep, tail]``, meaning the
new lines are ``old[drop:drop + keep] + tail`` (``lab`` null: no terminal open, lines empty). The
first poll sends every open terminal in full (``drop = keep = 0``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from labserver.models import Environment
from labserver.services.support.terminal_tail import last_lines
from labserver.terminals.sessions import Key, TerminalHub

INTERVAL_S = 1.0  # a thumbnail changes at most this often (the stream's tick)
ROWS = 10  # lines per thumbnail
COLS = 80  # characters per line
ENV_REFRESH_TICKS = 30  # the event's environments are read again every this many ticks

Update = list[Any]  # [attendee_id, lab | None, drop, keep, tail]


def event_envs(engine: Engine, event_id: int) -> dict[str, int]:
    """{environment id: attendee id} of the event's environments (a short session of its own:
    blocking, call it in a worker thread)."""
    with Session(engine) as session:
        rows = session.execute(
            sa_select(col(Environment.id), col(Environment.attendee_id)).where(
                col(Environment.event_id) == event_id
            )
        ).all()
    return {env_id: attendee_id for env_id, attendee_id in rows}


def delta(old: list[str], new: list[str]) -> tuple[int, int, list[str]]:
    """``(drop, keep, tail)`` with ``old[drop:drop + keep] + tail == new`` and ``keep`` as large as
    it gets (a scroll by n lines keeps all but n; ties take the smallest ``drop``)."""
    best_drop, best_keep = len(old), 0
    for drop in range(len(old)):
        keep = 0
        while keep < len(new) and drop + keep < len(old) and old[drop + keep] == new[keep]:
            keep += 1
        if keep > best_keep:
            best_drop, best_keep = drop, keep
    return best_drop, best_keep, new[best_keep:]


@dataclass
class _Sent:
    key: Key
    output_bytes: int
    lines: list[str]


class GalleryFeed:
    """What one page has been sent; :meth:`poll` answers what changed since (see the module)."""

    def __init__(
        self, terminals: TerminalHub, envs: dict[str, int], *, rows: int = ROWS, cols: int = COLS
    ) -> None:
        self.terminals = terminals
        self.envs = dict(envs)
        self.rows = rows
        self.cols = cols
        self.polls = 0
        self._seen: dict[Key, int] = {}  # output_bytes at the last poll
        self._changed: dict[Key, int] = {}  # the poll that last saw new output
        self._sent: dict[int, _Sent] = {}

    def refresh_due(self) -> bool:
        return self.polls > 0 and self.polls % ENV_REFRESH_TICKS == 0

    def poll(self) -> list[Update]:
        """At most one update per attendee whose thumbnail changed (see the module)."""
        self.polls += 1
        shown: dict[int, Key] = {}  # attendee -> the terminal with the latest output
        live: dict[Key, int] = {}
        for key, session in list(self.terminals.sessions.items()):
            attendee = self.envs.get(key[0])
            if attendee is None or session.closed:
                continue
            n = session.output_bytes
            live[key] = n
            if self._seen.get(key) != n:
                self._seen[key] = n
                self._changed[key] = self.polls
            other = shown.get(attendee)
            if other is None or self._changed[key] >= self._changed[other]:
                shown[attendee] = key
        for key in [k for k in self._seen if k not in live]:
            self._seen.pop(key, None)
            self._changed.pop(key, None)
        out: list[Update] = []
        for attendee, key in shown.items():
            sent = self._sent.get(attendee)
            n = live[key]
            if sent is not None and sent.key == key and sent.output_bytes == n:
                continue
            session = self.terminals.sessions[key]
            lines = last_lines(session.scrollback, self.rows, self.cols)
            same_lab = sent is not None and sent.key == key
            old = sent.lines if same_lab and sent is not None else []
            self._sent[attendee] = _Sent(key, n, lines)
            if same_lab and lines == old:
                continue
            drop, keep, tail = delta(old, lines)
            out.append([attendee, key[1], drop, keep, tail])
        for attendee in [a for a in self._sent if a not in shown]:
            del self._sent[attendee]
            out.append([attendee, None, 0, 0, []])
        return out
