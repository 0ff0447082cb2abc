"""The self-paced learner: where its data lives, the one event and attendee made on first start
(``DATA_DIR/selfpaced.json``, mode 0600), and the bridge from a lab folder back to its learner that
``labserver check`` uses (:func:`learner_for_folder`, :func:`record_check`).

Where things live: ``DATA_DIR`` is ``LABSERVER_DATA_DIR`` when set, else the user's data folder from
:mod:`platformdirs` (``~/.local/share/labserver`` on Linux). The learner's lab folders are in
``DATA_DIR/workspaces/<env-id>/<lab-id>/``.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from labserver import clock, db
from labserver.backends.base import CheckRaw
from labserver.backends.local import MARKER
from labserver.checks.verdict import Verdict
from labserver.config import Settings
from labserver.models import Attendee, CheckRun, Event
from labserver.services.joining.events import create_event, hash_token
from labserver.services.provisioning.environments import env_id_for

STATE_FILE = "selfpaced.json"
EVENT_TITLE = "Self-paced labs"


# -- where ------------------------------------------------------------------------------------
def default_data_dir() -> Path:
    """``LABSERVER_DATA_DIR`` when set, else the user's data folder (platformdirs)."""
    env = os.environ.get("LABSERVER_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("labserver", appauthor=False))


def selfpaced_settings(data_dir: Path | None = None, *, backend: str = "local") -> Settings:
    """Settings of a self-paced run: other ``LABSERVER_*`` variables still apply, but the database
    is always the SQLite file in the data folder (progress stays on the laptop)."""
    settings = Settings()
    return settings.model_copy(
        update={
            "data_dir": (data_dir or default_data_dir()).expanduser().resolve(),
            "database_url": "",
            "selfpaced": True,
            "backend": backend,
        }
    )


# -- the learner ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Learner:
    event_id: int
    attendee_id: int
    name: str
    token: str

    @property
    def env_id(self) -> str:
        return env_id_for(self.event_id, self.attendee_id)


def read_learner(data_dir: Path) -> Learner | None:
    path = data_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
        return Learner(int(data["event_id"]), int(data["attendee_id"]), str(data["name"]), str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def ensure_learner(engine: Engine, data_dir: Path, name: str = "") -> Learner:
    """The self-paced event and its one attendee, made on first start (idempotent). The token is
    kept in ``selfpaced.json``; if that file was lost, a new token is issued to the same attendee,
    so progress is never orphaned."""
    known = read_learner(data_dir)
    with Session(engine, expire_on_commit=False) as session:
        if known is not None:
            attendee = session.get(Attendee, known.attendee_id)
            if (
                attendee is not None
                and attendee.event_id == known.event_id
                and attendee.token_hash == hash_token(known.token)
            ):
                return known
        event = session.exec(
            select(Event).where(Event.selfpaced == True).order_by(col(Event.id))  # noqa: E712
        ).first()
        if event is None:
            event = create_event(
                session,
                title=EVENT_TITLE,
                labs=[],
                code="SELF" + secrets.token_hex(4).upper(),
                selfpaced=True,
            )
        assert event.id is not None
        attendee = session.exec(
            select(Attendee).where(Attendee.event_id == event.id).order_by(col(Attendee.id))
        ).first()
        token = secrets.token_urlsafe(32)
        if attendee is None:
            display = " ".join((name or _default_name()).split())[:80] or "learner"
            attendee = Attendee(event_id=event.id, name=display, token_hash=hash_token(token))
        else:
            attendee.token_hash = hash_token(token)
        session.add(attendee)
        session.commit()
        session.refresh(attendee)
        assert attendee.id is not None
        learner = Learner(event.id, attendee.id, attendee.name, token)
    write_private(data_dir / STATE_FILE, json.dumps(asdict(learner), indent=2))
    return learner


def _default_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name on some containers
        return "learner"


def learner_for_folder(folder: Path) -> tuple[Path, Learner] | None:
    """(data_dir, learner) when ``folder`` is a lab folder of a self-paced learner's workspace
    (``DATA_DIR/workspaces/<env>/<lab>``), else None."""
    workspace = folder.resolve().parent
    try:
        marker = json.loads((workspace / MARKER).read_text())
    except (OSError, ValueError):
        return None
    data_dir = workspace.parent.parent
    learner = read_learner(data_dir)
    if learner is None or marker.get("env_id") != learner.env_id:
        return None
    return data_dir, learner


def default_lab_folder(lab_id: str) -> Path | None:
    """The self-paced learner's folder of ``lab_id`` in the default data folder, if it exists."""
    data_dir = default_data_dir()
    learner = read_learner(data_dir)
    if learner is None:
        return None
    folder = data_dir / "workspaces" / learner.env_id / lab_id
    return folder if folder.is_dir() else None


def record_check(
    data_dir: Path, learner: Learner, lab_id: str, step_id: str, verdict: Verdict, raw: CheckRaw
) -> int:
    """Store a check run made by ``labserver check`` in the self-paced database; returns its id."""
    engine = db.make_engine(f"sqlite:///{data_dir / 'labserver.db'}")
    try:
        with Session(engine, expire_on_commit=False) as session:
            run = CheckRun(
                event_id=learner.event_id,
                attendee_id=learner.attendee_id,
                lab_id=lab_id,
                step_id=step_id,
                status=verdict.status,
                message=verdict.message,
                hints=list(verdict.hints),
                metrics=dict(verdict.metrics),
                tables=list(verdict.tables),
                log=raw.log.decode("utf-8", "replace"),
                log_truncated=raw.log_truncated,
                exit_code=raw.exit_code,
                duration_s=raw.duration_s,
                cpu_s=verdict.cpu_s,
                finished_at=clock.now(),
            )
            session.add(run)
            session.commit()
            assert run.id is not None
            return run.id
    finally:
        engine.dispose()
