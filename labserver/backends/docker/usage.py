"""What the Docker engines hold, kept in memory so that a placement decision lists nothing.

Before this module every decision listed every container of every engine under the placement lock
(3.6 s for 30 decisions in a burst). :class:`UsageBook` keeps, per engine, one :class:`Running` per
labserver container (keyed by container id, which a warm claim's rename does not change) and hands
the pure :func:`~.scheduler.place` a :class:`~.scheduler.Usage` built from memory.

Promises
--------
- **Rebuilt from labels** (the containers stay the source of truth): an engine's entries are
  replaced by what its ``labserver.*`` labels say when the book first needs it (server start), after
  that engine failed a call (``mark_stale``: engine recovery) and when its listing is older than
  ``max_age_s`` (another labserver instance sharing the engine, a container removed by hand).
- **Updated on create, stop, start and destroy** by the backend (:meth:`add`, :meth:`set_active`,
  :meth:`remove`). A *stopped* container keeps its entry and its card (``scheduler`` rules: a card is
  held while the container exists) but is inactive: it promises no CPU or memory, exactly as the
  label rebuild counts it from the container's state.
- Only the caller's decision is serialised (``Engines`` holds its placement lock around
  :meth:`usage` + ``place`` + the reservation); a rebuild lists one engine, and only when it is due.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labserver.backends.docker import config as dc
from labserver.backends.docker.scheduler import Running, Usage


def running_from_labels(
    labels: Mapping[str, str], node: str, fallback_id: str, state: str = "running"
) -> Running | None:
    """The :class:`Running` a container's labels (and engine state) tell; None for a container that
    holds nothing (a grader, or no labserver role). ``exited`` / ``dead`` containers are inactive."""
    if labels.get(dc.LABEL_ROLE) not in ("env", "warm"):
        return None
    card = labels.get("labserver.card")
    return Running(
        labels.get(dc.LABEL_ENV, fallback_id),
        node,
        float(labels.get("labserver.cpus", 1)),
        int(labels.get("labserver.memory_mb", 0)),
        int(card) if card is not None else None,
        active=state not in INACTIVE_STATES,
    )


INACTIVE_STATES = ("exited", "dead")


@dataclass
class _Engine:
    held: dict[str, Running] = field(default_factory=dict)  # container id -> what it holds
    listed_at: float | None = None  # monotonic time of the last rebuild; None = must rebuild


class UsageBook:
    """Per-engine usage in memory (see the module docstring). ``lister(engine)`` returns
    ``[(container id, labels, node, state), ...]`` for one engine and raises when the engine does not
    answer; it is only called by :meth:`usage` for an engine whose entries are due."""

    def __init__(
        self,
        lister: Callable[[str], Awaitable[Sequence[tuple[str, Mapping[str, str], str, str]]]],
        *,
        max_age_s: float = 60.0,
        retry_s: float = 0.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister = lister
        self._engines: dict[str, _Engine] = {}
        self.max_age_s = max_age_s
        self.retry_s = retry_s  # a failed listing is not retried before this (a frozen engine)
        self._failed_at: dict[str, float] = {}
        self._now = now
        #: how many engine listings the book made (tests and the bench read it)
        self.rebuilds = 0

    def _engine(self, engine: str) -> _Engine:
        return self._engines.setdefault(engine, _Engine())

    def _due(self, engine: str) -> bool:
        failed = self._failed_at.get(engine)
        if failed is not None and self._now() - failed < self.retry_s:
            return False
        listed = self._engine(engine).listed_at
        return listed is None or self._now() - listed >= self.max_age_s

    async def usage(self, engines: Iterable[str]) -> Usage:
        """Everything held on ``engines``; rebuilds the entries of an engine that is due. An engine
        whose listing fails keeps its last entries (and stays due)."""
        for engine in engines:
            if self._due(engine):
                await self.rebuild(engine)
        return Usage([r for e in self._engines.values() for r in e.held.values()])

    async def rebuild(self, engine: str) -> None:
        """Replace ``engine``'s entries by what its containers' labels say (raises nothing: an
        engine that does not answer keeps its entries and is tried again next time)."""
        try:
            listed = await self._lister(engine)
        except Exception:  # noqa: BLE001 - down or failing: keep what we knew, retry after retry_s
            self._engine(engine).listed_at = None
            self._failed_at[engine] = self._now()
            return
        self._failed_at.pop(engine, None)
        self.rebuilds += 1
        held = {}
        for cid, labels, node, state in listed:
            running = running_from_labels(labels, node, cid, state)
            if running is not None:
                held[cid] = running
        entry = self._engine(engine)
        entry.held = held
        entry.listed_at = self._now()

    def add(self, engine: str, container_id: str, running: Running) -> None:
        """A container was made on ``engine`` (or found: idempotent)."""
        self._engine(engine).held[container_id] = running

    def set_active(self, container_id: str, active: bool) -> None:
        """A container was stopped (``False``: its CPU and memory are free) or started again."""
        for entry in self._engines.values():
            if (held := entry.held.get(container_id)) is not None:
                entry.held[container_id] = dataclasses.replace(held, active=active)

    def remove(self, container_id: str) -> None:
        """A container was removed (or is gone: idempotent)."""
        for entry in self._engines.values():
            entry.held.pop(container_id, None)

    def mark_stale(self, engine: str) -> None:
        """``engine`` failed a call: rebuild its entries from labels at the next decision."""
        self._engine(engine).listed_at = None

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per engine: containers, cpus and memory promised, cards held (for metrics)."""
        out = {}
        for name, entry in self._engines.items():
            held = entry.held.values()
            out[name] = {
                "count": len(entry.held),
                "stopped": sum(not r.active for r in held),
                "cpus": sum(r.cpus for r in held if r.active),
                "memory_mb": sum(r.memory_mb for r in held if r.active),
                "cards": sorted((r.node, r.card) for r in held if r.card is not None),
            }
        return out
