"""Self-paced mode's server: the normal app on 127.0.0.1 with ``settings.selfpaced = True`` and the
one learner of :mod:`labserver.selfpaced.learner`. A small ASGI middleware, :class:`LoopbackLogin`,
hands that learner's cookie to every request that comes from this machine and from a page of this
server, so ``/`` opens straight onto the lab list.

Security contract of the auto-login (only ever installed when ``settings.selfpaced`` is true):

- the peer address is loopback (127.0.0.0/8 or ::1);
- the ``Host`` header names loopback (``127.0.0.1``, ``localhost``, ``[::1]``), so a DNS-rebinding
  page on another domain gets nothing;
- an ``Origin`` header, when present, is a loopback origin, and ``Sec-Fetch-Site`` is not
  ``cross-site``, so another web site open in the same browser cannot drive the learner's terminal
  or files (CSRF, cross-site WebSockets).

Anything else is passed through untouched (and then needs a real token like any attendee).

``DATA_DIR/selfpaced-server.json`` says where a running self-paced server listens, so
``labserver check`` can run the check through it (:func:`check_through_server`; the browser updates
at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import threading
import time
import webbrowser
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlmodel import Session

from labserver.app import create_app
from labserver.checks.verdict import Verdict
from labserver.config import Settings
from labserver.models import Attendee, CheckStatus, Event
from labserver.routes.deps import ATTENDEE_COOKIE
from labserver.selfpaced.learner import Learner, ensure_learner, write_private
from labserver.services.provisioning.environments import ensure_environment

SERVER_FILE = "selfpaced-server.json"
DEFAULT_PORT = 8765
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", "[::1]"}


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
        write_private(info_path, json.dumps({"url": base, "port": port, "pid": os.getpid()}))
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


def check_through_server(
    data_dir: Path, learner: Learner, lab_id: str, step_id: str
) -> tuple[Verdict, str] | None:
    """Run the check through a running self-paced server (it records the result and the browser
    updates at once); (verdict, log) for ``labserver check`` to print, None when no server answers."""
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
    return verdict, str(run.get("log", ""))
