"""Engine creation and migrations. SQLite runs in WAL mode; PostgreSQL through
``LABSERVER_DATABASE_URL``. Migrations (Alembic, ``labserver/migrations``) are applied at start.

The connection pool (size, overflow, timeout: ``LABSERVER_DB__*``) is small on purpose: no request
holds a connection across an engine call, a checker run, file I/O or a wait (:func:`release`
before each), so a room of hundreds shares a handful. Every checkout's wait is measured
(:data:`labserver.observability.metrics.DB_POOL_WAIT`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from labserver.config import DatabaseSettings
from labserver.observability import metrics

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, pool: DatabaseSettings | None = None) -> Engine:
    pool = pool or DatabaseSettings()
    sizes: dict[str, Any] = {
        "poolclass": metrics.TimedQueuePool,
        "pool_size": pool.pool_size,
        "max_overflow": pool.max_overflow,
        "pool_timeout": pool.pool_timeout_s,
    }
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    if url.startswith("sqlite"):
        if ":memory:" in url or url in ("sqlite://", "sqlite:///"):
            sizes = {}
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **sizes)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    engine = create_engine(url, pool_pre_ping=True, **sizes)
    return engine


def release(session: Session) -> None:
    """End the session's transaction so its connection goes back to the pool before slow work (an
    engine call, a checker, file I/O, a wait). Loaded objects stay usable (``expire_on_commit`` is
    off); the next query checks a connection out again. Pending changes are committed."""
    session.commit()


P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args)`` in a worker thread, off the event loop (a commit that waits for SQLite's write
    lock or a pool checkout must not hold up every stream of the room). Unlike a bare
    ``asyncio.to_thread``, a cancellation (server shutdown) waits for the thread to finish before it
    is raised: the caller's ``with Session(...)`` must not close a session another thread is in the
    middle of committing (SQLAlchemy's ``IllegalStateChangeError``, and a write lock left behind)."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(work)
            break
        except asyncio.CancelledError:
            if work.done():
                raise
            cancelled = True  # keep waiting for the thread, then raise
    if cancelled:
        raise asyncio.CancelledError
    return result


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    if engine.url.get_backend_name() == "sqlite" and engine.url.database:
        Path(engine.url.database).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(engine), revision)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session
