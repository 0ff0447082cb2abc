"""``create_app(settings) -> FastAPI``. Nothing happens at import time: the engine, the lab catalog,
the backend and the live hub are built here and kept on ``app.state.ctx``."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlmodel import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from labserver import __version__, db
from labserver.backends import make_backend
from labserver.backends.base import BackendError, PathRefused, TooBig, WorkspaceFull, safe_relpath
from labserver.config import Settings
from labserver.content import LabCatalog
from labserver.content.lab_watch import watch_labs
from labserver.content.loader import Problem
from labserver.edge import safe_json
from labserver.edge.body_limit import BodyLimitMiddleware
from labserver.edge.csrf import CSRFMiddleware
from labserver.edge.http_observe import RequestObserver
from labserver.i18n import gettext, pick_lang
from labserver.live import Kind, LiveHub
from labserver.routes import api, completion, pages, progress, recordings, share, terminal
from labserver.routes import metrics as metrics_route
from labserver.routes.instructor import router as instructor
from labserver.services.context import AppContext
from labserver.services.grading.fair_queue import CheckQueue
from labserver.services.operations.lifecycle import housekeeping
from labserver.services.operations.recovery import (
    finish_orphaned_runs,
    reap_leaked_graders,
    retry_orphaned_runs,
)
from labserver.services.provisioning import workspace_full
from labserver.services.provisioning.admission import Admission, default_limit
from labserver.services.provisioning.environments import reconcile
from labserver.services.provisioning.warming import start_warming
from labserver.services.staff import oidc
from labserver.services.staff.revocation import keep_watch
from labserver.terminals.recorder import RecordingStore
from labserver.terminals.sessions import TerminalHub

log = logging.getLogger(__name__)

#: problems of a broken lab sent with ``lab.changed`` (the page reloads and shows them all)
MAX_PROBLEMS_SHOWN = 20

#: threads of the event loop's default executor (database steps, file operations, live reads)
WORKER_THREADS = 32

#: npm packages whose files the pages load, mounted under /vendor/<name>
VENDOR = {
    "xterm": "@xterm/xterm",
    "xterm-addon-fit": "@xterm/addon-fit",
    "codemirror": "codemirror",
    "chart.js": "chart.js",
    "asciinema-player": "asciinema-player",
}


def recording_store(settings: Settings) -> RecordingStore:
    rec = settings.recording
    return RecordingStore(
        settings.recordings_dir,
        max_bytes=int(rec.max_mb * 1024 * 1024),
        flush_s=rec.flush_s,
        enabled=rec.enabled,
    )


def vendor_dir(settings: Settings) -> Path:
    return settings.web_dir / "node_modules"


def build_context(settings: Settings, dev_labs: Sequence[Path] = ()) -> AppContext:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.ensure_secret_key()
    engine = db.make_engine(settings.sqlalchemy_url, settings.db)
    db.upgrade(engine)
    ctx = AppContext(
        settings=settings,
        engine=engine,
        catalog=LabCatalog(settings.labs_dir, folders=list(dev_labs) if dev_labs else None),
        backend=make_backend(settings),
        live=LiveHub(),
        terminals=TerminalHub(recordings=recording_store(settings)),
        admission=Admission(settings.admission.concurrent_starts or default_limit(settings.backend)),
    )
    ctx.check_slots = asyncio.Semaphore(settings.checks.max_concurrent)
    if settings.checks.fair_queue:
        ctx.check_queue = CheckQueue(
            settings.checks.max_concurrent,
            budget_s=settings.checks.fair_budget_s,
            window_s=settings.checks.fair_window_s,
            reserve=settings.checks.fair_reserve,
            idle_after_s=settings.checks.idle_after_s,
            idle_cpu_s=settings.checks.idle_cpu_s,
        )
    for broken in ctx.catalog.broken.values():
        log.error("lab %s is unavailable: %s", broken.id, "; ".join(map(str, broken.problems)))
    return ctx


def _workspace_full(req: Request, size_mb: int) -> JSONResponse:
    detail = workspace_full.message(pick_lang(req), size_mb)
    return JSONResponse({"detail": detail, "reason": "disk-full"}, status_code=507)


def publish_lab_changed(ctx: AppContext, lab_id: str, problems: Sequence[Problem]) -> None:
    """``lab.changed`` to every event with an open page (``serve --dev``): the lab's pages refresh
    their text, or show the lab's problems when it broke."""
    errors = [str(p) for p in problems if p.level == "error"]
    for event_id in ctx.live.event_ids():
        ctx.live.publish(
            Kind.lab_changed,
            event_id,
            None,
            lab=lab_id,
            broken=lab_id in ctx.catalog.broken,
            problems=errors[:MAX_PROBLEMS_SHOWN],
        )


def create_app(settings: Settings | None = None, *, dev_labs: Sequence[Path] = ()) -> FastAPI:
    """The app; with ``dev_labs`` (``serve --dev``) the catalog is exactly those lab folders, and
    they reload, lint and refresh their open pages as their files change (content/lab_watch.py)."""
    settings = settings or Settings()
    ctx = build_context(settings, dev_labs)
    ctx.dev_labs = tuple(dev_labs)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # every database step and file operation of the room runs in the loop's default executor
        # (asyncio.to_thread): its default size, cores + 4, is 6 threads on a 2-core server
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="labserver")
        )
        with Session(ctx.engine, expire_on_commit=False) as session:
            orphaned = finish_orphaned_runs(
                session
            )  # before any check can start (services/operations/recovery.py)
        try:
            await reap_leaked_graders(ctx.backend)
        except Exception:  # an engine outage must not stop the server from starting
            log.exception("could not reap leaked grader containers")
        with Session(ctx.engine, expire_on_commit=False) as session:  # released before each engine call
            try:
                orphans = await reconcile(ctx, session)
                if orphans:
                    log.warning("%d environments have no database row", len(orphans))
            except BackendError as exc:
                log.error("could not reconcile environments: %s (%s)", exc.message, exc.log)
        if orphaned:  # pressed again once the environments are re-adopted
            retry = asyncio.ensure_future(retry_orphaned_runs(ctx, orphaned))
            ctx.background.add(retry)
            retry.add_done_callback(ctx.background.discard)
        task = asyncio.ensure_future(housekeeping(ctx))
        if ctx.dev_labs:
            watcher = asyncio.ensure_future(
                watch_labs(ctx.catalog, ctx.dev_labs, lambda lab, found: publish_lab_changed(ctx, lab, found))
            )
            ctx.background.add(watcher)
        watch = asyncio.ensure_future(keep_watch(ctx))  # staff streams end with their right
        start_warming(ctx)  # open events' pools fill now, not at the first housekeeping tick
        app.state.ready = True
        try:
            yield
        finally:
            task.cancel()
            watch.cancel()
            for started in list(ctx.background):
                started.cancel()
            await ctx.terminals.close_all()
            ctx.engine.dispose()

    app = FastAPI(
        title="labserver",
        version=__version__,
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
    )
    app.state.ctx = ctx
    app.state.ready = False
    conf = settings.staff.oidc
    ctx.oidc = oidc.make_client(conf.issuer, conf.client_id, conf.client_secret, conf.scope)
    if ctx.oidc is not None:  # the provider round trip keeps its state and nonce in a signed cookie
        from starlette.middleware.sessions import SessionMiddleware

        app.add_middleware(
            SessionMiddleware,
            secret_key=settings.ensure_secret_key(),
            session_cookie="labserver_oidc",
            max_age=600,
            path="/instructor/oidc",
            same_site="lax",
        )
    app.add_middleware(CSRFMiddleware, trusted_origins=settings.trusted_origins)
    app.add_middleware(BodyLimitMiddleware)  # before anything reads a body
    app.add_middleware(RequestObserver)  # added last: outermost (request id, log context, HTTP latency)

    @app.exception_handler(BackendError)
    async def _backend_error(req: Request, exc: BackendError) -> JSONResponse:
        if isinstance(exc, WorkspaceFull):
            return _workspace_full(req, exc.size_mb)
        if isinstance(exc, TooBig):
            detail = gettext(
                pick_lang(req),
                "{what} is too big for the browser ({size} MB; at most {limit} MB): open it in the terminal instead.",
            ).format(what=exc.what, size=f"{exc.size / 1e6:.1f}", limit=exc.limit // 1_000_000)
            return JSONResponse({"detail": detail, "reason": exc.reason}, status_code=413)
        status = 400 if isinstance(exc, PathRefused) else 413 if isinstance(exc, TooBig) else 503
        return JSONResponse({"detail": exc.message, "reason": exc.reason}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers any failure while parsing a JSON body "There was an error parsing the
        # body"; say what was wrong when it was a limit (deep nesting, a huge number)
        clear = safe_json.explain(exc.__cause__) if exc.status_code == 400 else None
        if clear is not None:
            return JSONResponse({"detail": clear, "code": "bad-json"}, status_code=400)
        return await http_exception_handler(req, exc)

    @app.exception_handler(OSError)
    async def _os_error(req: Request, exc: OSError) -> Response:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the local backend's workspace (or disk) is full
            return _workspace_full(req, 0)
        raise exc

    @app.exception_handler(FileNotFoundError)
    async def _not_found(_req: Request, exc: FileNotFoundError) -> JSONResponse:
        # ours carry the path as their message; the OS's carry (errno, strerror) and a filename
        name = exc.args[0] if exc.args and isinstance(exc.args[0], str) else Path(exc.filename or "").name
        return JSONResponse({"detail": f"No such file: {name}"}, status_code=404)

    @app.exception_handler(IsADirectoryError)
    async def _is_dir(_req: Request, exc: IsADirectoryError) -> JSONResponse:
        return JSONResponse({"detail": "That is a folder, not a file."}, status_code=400)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str | int]:
        """Readiness: answers once the server is up (version and lab counts)."""
        return {
            "status": "ok",
            "version": __version__,
            "labs": len(ctx.catalog.labs),
            "broken_labs": len(ctx.catalog.broken),
        }

    @app.get("/labs/{lab_id}/assets/{path:path}", include_in_schema=False)
    def lab_asset(lab_id: str, path: str) -> FileResponse:
        """A file a lab's instructions show (images under the lab's steps/; never Markdown)."""
        lab = ctx.catalog.get(lab_id)
        if lab is None:
            raise HTTPException(404)
        base = (lab.path / "steps").resolve()
        try:
            target = (base / safe_relpath(path)).resolve()
        except (PathRefused, OSError):  # a name too long for the file system, a loop of links
            raise HTTPException(404) from None
        if not target.is_relative_to(base) or not target.is_file() or target.suffix == ".md":
            raise HTTPException(404)
        return FileResponse(target)

    for module in (api, terminal, progress, completion, pages, instructor, metrics_route):
        app.include_router(module.router)
    for extra in (recordings.router, recordings.instructor, share.attendee, share.instructor):
        app.include_router(extra)

    static = settings.web_dir / "static"
    if static.is_dir():
        app.mount("/static", StaticFiles(directory=static), name="static")
    modules = vendor_dir(settings)
    for name, package in VENDOR.items():
        folder = modules / package
        if folder.is_dir():
            app.mount(f"/vendor/{name}", StaticFiles(directory=folder), name=f"vendor-{name}")
        else:
            log.error("web asset %s is missing: run `make web` (npm ci in web/)", folder)
    return app
