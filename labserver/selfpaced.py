"""Self-paced mode: the labs on a laptop, one local learner, no join code, no network.

``labserver selfpaced`` runs the normal app on 127.0.0.1 with ``settings.selfpaced = True``. On first
start it makes one event (``selfpaced=True``) and one attendee, and keeps their ids and the
attendee's token in ``DATA_DIR/selfpaced.json`` (mode 0600). A small ASGI middleware,
:class:`LoopbackLogin`, then hands that attendee's cookie to every request that comes from this
machine and from a page of this server, so ``/`` opens straight onto the lab list.

Security contract of the auto-login (only ever installed when ``settings.selfpaced`` is true):

- the peer address is loopback (127.0.0.0/8 or ::1);
- the ``Host`` header names loopback (``127.0.0.1``, ``localhost``, ``[::1]``), so a DNS-rebinding
  page on another domain gets nothing;
- an ``Origin`` header, when present, is a loopback origin, and ``Sec-Fetch-Site`` is not
  ``cross-site``, so another web site open in the same browser cannot drive the learner's terminal
  or files (CSRF, cross-site WebSockets).

Anything else is passed through untouched (and then needs a real token like any attendee).

Where things live: ``DATA_DIR`` is ``LABSERVER_DATA_DIR`` when set, else the user's data folder from
:mod:`platformdirs` (``~/.local/share/labserver`` on Linux). The learner's lab folders are in
``DATA_DIR/workspaces/<env-id>/<lab-id>/``; ``DATA_DIR/selfpaced-server.json`` says where a running
self-paced server listens, so ``labserver check`` can run the check through it (and the browser
updates at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import ipaddress
import json
import os
import secrets
import socket
import threading
import time
import webbrowser
from dataclasses import asdict, dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from labserver.config import Settings
from labserver.models import Attendee, Event
from labserver.routes.deps import ATTENDEE_COOKIE
from labserver.services.events import create_event, hash_token

if TYPE_CHECKING:
    from fastapi import FastAPI

    from labserver.backends.base import CheckRaw
    from labserver.checks import Verdict

STATE_FILE = "selfpaced.json"
SERVER_FILE = "selfpaced-server.json"
EVENT_TITLE = "Self-paced labs"
DEFAULT_PORT = 8765
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", "[::1]"}


# -- where ------------------------------------------------------------------------------------
def default_data_dir() -> Path:
    """``LABSERVER_DATA_DIR`` when set, else the user's data folder (platformdirs)."""
    env = os.environ.get("LABSERVER_DATA_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

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
        from labserver.services.environments import env_id_for

        return env_id_for(self.event_id, self.attendee_id)


def read_learner(data_dir: Path) -> Learner | None:
    path = data_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
        return Learner(int(data["event_id"]), int(data["attendee_id"]), str(data["name"]), str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_private(path: Path, text: str) -> None:
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
    _write_private(data_dir / STATE_FILE, json.dumps(asdict(learner), indent=2))
    return learner


def _default_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name on some containers
        return "learner"


# -- auto-login ---------------------------------------------------------------------------------
def _is_loopback_host(host: str) -> bool:
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_loopback_origin(origin: str) -> bool:
    for scheme in ("http://", "https://", "ws://", "wss://"):
        if origin.startswith(scheme):
            return _is_loopback_host(origin[len(scheme) :].split("/", 1)[0])
    return False


def request_is_local(scope: dict[str, Any]) -> bool:
    """True when an HTTP or WebSocket request comes from this machine and from one of this
    server's own pages (see the module docstring)."""
    client = scope.get("client")
    if not client or not _is_loopback_host(str(client[0])):
        return False
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    if not _is_loopback_host(headers.get("host", "")):
        return False
    origin = headers.get("origin")
    if origin is not None and not _is_loopback_origin(origin):
        return False
    return headers.get("sec-fetch-site", "") != "cross-site"


class LoopbackLogin:
    """ASGI middleware: give local requests the self-paced attendee's cookie (and set it in the
    browser), so no join page is ever needed. Requests carrying an ``Authorization`` header are
    left alone."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or not request_is_local(scope):
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", []))
        if any(k.lower() == b"authorization" for k, _ in headers):
            await self.app(scope, receive, send)
            return
        cookies: SimpleCookie = SimpleCookie()
        for key, value in headers:
            if key.lower() == b"cookie":
                with contextlib.suppress(Exception):
                    cookies.load(value.decode("latin-1"))
        current = cookies[ATTENDEE_COOKIE].value if ATTENDEE_COOKIE in cookies else ""
        if current == self.token:
            await self.app(scope, receive, send)
            return
        pairs = [f"{k}={m.value}" for k, m in cookies.items() if k != ATTENDEE_COOKIE]
        pairs.append(f"{ATTENDEE_COOKIE}={self.token}")
        headers = [(k, v) for k, v in headers if k.lower() != b"cookie"]
        headers.append((b"cookie", "; ".join(pairs).encode("latin-1")))
        scope = dict(scope, headers=headers)
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        set_cookie = (
            f"{ATTENDEE_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={365 * 24 * 3600}"
        ).encode("latin-1")

        async def send_with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []), (b"set-cookie", set_cookie)])
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def create_selfpaced_app(settings: Settings, name: str = "") -> FastAPI:
    """The normal app plus the self-paced learner and the loopback auto-login."""
    from labserver.app import create_app

    if not settings.selfpaced:
        raise ValueError("create_selfpaced_app needs settings.selfpaced = True")
    app = create_app(settings)
    learner = ensure_learner(app.state.ctx.engine, settings.data_dir, name)
    app.state.learner = learner
    app.add_middleware(LoopbackLogin, token=learner.token)
    return app


async def prepare_workspace(app: FastAPI) -> Path | None:
    """Create the learner's environment now (lab folders seeded), so ``labserver check`` and an
    editor outside the browser find them. Returns the workspace folder for the local backend."""
    from labserver.services.environments import ensure_environment

    ctx = app.state.ctx
    learner: Learner = app.state.learner
    with Session(ctx.engine, expire_on_commit=False) as session:
        event = session.get(Event, learner.event_id)
        attendee = session.get(Attendee, learner.attendee_id)
        assert event is not None and attendee is not None
        ref = await ensure_environment(ctx, session, event=event, attendee=attendee)
    return Path(ref.infra_id) if ref.backend == "local" else None


# -- running ------------------------------------------------------------------------------------
def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pick_port(wanted: int) -> int:
    if wanted and port_is_free(wanted):
        return wanted
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def running_server(data_dir: Path) -> dict[str, Any] | None:
    """``{"url", "pid", "port"}`` of a self-paced server that answers for this data folder."""
    import httpx

    try:
        info = json.loads((data_dir / SERVER_FILE).read_text())
        url = str(info["url"])
        os.kill(int(info["pid"]), 0)  # a file left by a server that was killed
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        resp = httpx.get(f"{url}/healthz", timeout=2.0, trust_env=False)
    except httpx.HTTPError:
        return None
    return info if resp.status_code == 200 else None


def lab_url(base: str, lab: str | None) -> str:
    return f"{base}/labs/{lab}" if lab else f"{base}/"


def serve(
    settings: Settings,
    *,
    lab: str | None = None,
    port: int = DEFAULT_PORT,
    open_browser: bool = True,
    name: str = "",
    echo: Any = print,
) -> None:
    """Run the self-paced server in the foreground until Ctrl+C."""
    import uvicorn

    existing = running_server(settings.data_dir)
    if existing is not None:
        url = lab_url(existing["url"], lab)
        echo(f"labserver self-paced is already running for {settings.data_dir}: {url}")
        if open_browser:
            webbrowser.open(url)
        return
    app = create_selfpaced_app(settings, name)
    ctx = app.state.ctx
    if lab and lab not in ctx.catalog.labs:
        known = ", ".join(ctx.catalog.labs) or "(none)"
        raise SystemExit(f"There is no lab {lab!r}. Labs: {known}")
    workspace = asyncio.run(prepare_workspace(app))
    ctx.env_locks.clear()  # made on that short-lived loop; the server's loop makes its own
    port = pick_port(port)
    base = f"http://127.0.0.1:{port}"
    url = lab_url(base, lab)
    echo("")
    echo(f"  labserver self-paced: {url}")
    echo(f"  learner     : {app.state.learner.name}")
    echo(f"  data folder : {settings.data_dir}")
    if workspace is not None:
        echo(f"  lab folders : {workspace}")
    echo(f"  labs        : {', '.join(ctx.catalog.labs) or '(none)'}")
    echo("  stop with Ctrl+C; your progress stays in the data folder")
    echo("")
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    info_path = settings.data_dir / SERVER_FILE

    def after_start() -> None:
        deadline = time.monotonic() + 60
        while not server.started and not server.should_exit and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            return
        _write_private(info_path, json.dumps({"url": base, "port": port, "pid": os.getpid()}))
        if open_browser:
            try:
                webbrowser.open(url)
            except Exception as exc:  # no browser on this machine: the URL above still works
                echo(f"  (could not open a browser: {exc}; open {url} yourself)")

    threading.Thread(target=after_start, daemon=True).start()
    try:
        server.run()
    finally:
        with contextlib.suppress(OSError):
            info = json.loads(info_path.read_text())
            if info.get("pid") == os.getpid():
                info_path.unlink()


# -- `labserver check` in self-paced mode -------------------------------------------------------
def learner_for_folder(folder: Path) -> tuple[Path, Learner] | None:
    """(data_dir, learner) when ``folder`` is a lab folder of a self-paced learner's workspace
    (``DATA_DIR/workspaces/<env>/<lab>``), else None."""
    from labserver.backends.local import MARKER

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


def check_through_server(data_dir: Path, learner: Learner, lab_id: str, step_id: str) -> int | None:
    """Run the check through a running self-paced server (it records the result and the browser
    updates at once). Prints the verdict like ``labserver check``; None when no server answers."""
    import httpx

    from labserver.checks import Verdict
    from labserver.cli_check import print_verdict
    from labserver.models import CheckStatus

    info = running_server(data_dir)
    if info is None:
        return None
    try:
        resp = httpx.post(
            f"{info['url']}/api/v1/labs/{lab_id}/steps/{step_id}/check",
            headers={"Authorization": f"Bearer {learner.token}"},
            params={"lang": os.environ.get("LAB_LANG", "en")},
            timeout=1900.0,
            trust_env=False,
        )
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    run = resp.json()
    status = CheckStatus(run["status"])
    verdict = Verdict(status, run["message"], list(run.get("hints", [])), dict(run.get("metrics", {})))
    print_verdict(verdict, run.get("log", ""))
    return {CheckStatus.passed: 0, CheckStatus.failed: 1}.get(status, 2)


def record_check(
    data_dir: Path, learner: Learner, lab_id: str, step_id: str, verdict: Verdict, raw: CheckRaw
) -> int:
    """Store a check run made by ``labserver check`` in the self-paced database; returns its id."""
    from labserver import clock, db
    from labserver.models import CheckRun

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
                log=raw.log.decode("utf-8", "replace"),
                log_truncated=raw.log_truncated,
                exit_code=raw.exit_code,
                duration_s=raw.duration_s,
                finished_at=clock.now(),
            )
            session.add(run)
            session.commit()
            assert run.id is not None
            return run.id
    finally:
        engine.dispose()
