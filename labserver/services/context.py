"""Everything a request needs, built once by ``create_app`` (never at import time)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from labserver.backends.base import Backend
from labserver.config import Settings
from labserver.content import LabCatalog
from labserver.live import LiveHub
from labserver.services.grading.fair_queue import CheckQueue
from labserver.services.joining.join_notes import JoinWatch
from labserver.services.provisioning.admission import Admission
from labserver.services.staff.watch import StaffWatch
from labserver.terminals.sessions import TerminalHub
from labserver.terminals.sharing import ShareBook


@dataclass
class AppContext:
    settings: Settings
    engine: Engine
    catalog: LabCatalog
    backend: Backend
    live: LiveHub
    terminals: TerminalHub
    admission: Admission = field(default_factory=lambda: Admission(4))
    check_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(4))
    check_queue: CheckQueue | None = None  # the fair queue (None: check_slots, the plain semaphore)
    join_watch: JoinWatch = field(default_factory=JoinWatch)  # user agent + address key per join
    #: staff streams, terminal views and shares, ended when their right goes (services/staff/watch.py)
    staff_watch: StaffWatch = field(default_factory=StaffWatch)
    #: Authlib's client of the OpenID Connect provider (services/staff/oidc.py), or None
    oidc: Any = None
    shares: ShareBook = field(default_factory=ShareBook)  # help with consent (labserver/terminals/sharing.py)
    #: ids of the check runs this server is running (services/operations/recovery.py: a ``running`` row not in
    #: here is one no live server will finish)
    checks_in_flight: set[int] = field(default_factory=set)
    #: ``running`` rows not in flight at the last sweep (closed when still so at the next)
    unowned_runs: set[int] = field(default_factory=set)
    env_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    check_locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    file_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    #: the server's event loop once it runs (services/provisioning/warming.py hands work to it from threads)
    loop: asyncio.AbstractEventLoop | None = None
    #: tasks started in the background (environment starts at join, warm pool fills), kept
    #: referenced until done so they are not collected
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    #: ``serve --dev LAB_DIR...``: the lab folders that reload as their files change (empty: a room)
    dev_labs: tuple[Path, ...] = ()

    def env_lock(self, env_id: str) -> asyncio.Lock:
        return self.env_locks.setdefault(env_id, asyncio.Lock())

    def check_lock(self, attendee_id: int) -> asyncio.Lock:
        return self.check_locks.setdefault(attendee_id, asyncio.Lock())

    def file_lock(self, env_id: str) -> asyncio.Lock:
        """Held while an editor save compares and writes (services/provisioning/files.py)."""
        return self.file_locks.setdefault(env_id, asyncio.Lock())
