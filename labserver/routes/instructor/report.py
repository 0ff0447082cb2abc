"""The post-event report for instructors (services/reporting/report.py): a page with charts, and the same
report as a self-contained HTML file and as JSON, both downloads; the event's completion key.

- ``GET /instructor/events/{id}/report``: the page (login redirect for anyone else)
- ``GET /api/v1/events/{id}/report.json`` / ``report.html``: the downloads (instructor only: 403)
- ``GET /api/v1/events/{id}/completion-key``: the public key of the event's completion records

:func:`standalone_html` is also what ``labserver report EVENT`` writes: the page's body with the
styles, Chart.js (from ``web/node_modules``) and the chart script inlined, so the file opens
anywhere, offline, and sends no request."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from sqlmodel import Session

from labserver import clock
from labserver.i18n import pick_lang
from labserver.routes.deps import Ctx, DbId, SessionDep, require
from labserver.routes.instructor.api import get_event
from labserver.routes.instructor.pages import instructor_base
from labserver.routes.pages import jinja_env, render_page, templates_dir
from labserver.schemas import CompletionKeyPublic, ReportPublic, json_file, media
from labserver.services.context import AppContext
from labserver.services.reporting import completion, report
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action

api = APIRouter(prefix="/api/v1", tags=["instructor"])
pages = APIRouter(prefix="/instructor", include_in_schema=False, tags=["instructor-pages"])

CHART_JS = ("chart.js", "dist", "chart.umd.js")


def _key(ctx: AppContext, session: Session, event_id: int) -> tuple[Any, CompletionKeyPublic]:
    event = get_event(session, event_id)
    return event, completion.public_key(event, ctx.settings.ensure_secret_key())


def _inline(text: str) -> str:
    """Text safe inside a ``<script>`` or ``<style>`` element."""
    return text.replace("</", "<\\/")


def standalone_html(ctx: AppContext, data: ReportPublic, key: CompletionKeyPublic, lang: str = "en") -> str:
    """The self-contained HTML report (module docstring)."""
    web = ctx.settings.web_dir
    chart = web.joinpath("node_modules", *CHART_JS)
    css = "\n".join(
        (web / "static" / name).read_text(encoding="utf-8") for name in ("instructor.css", "css/report.css")
    )
    context = {
        "lang": lang,
        "report": data.model_dump(mode="json"),
        "key": key.model_dump(),
        "css": _inline(css),
        "chartjs": _inline(chart.read_text(encoding="utf-8")) if chart.is_file() else "",
        "reportjs": _inline((web / "static" / "js" / "report.js").read_text(encoding="utf-8")),
    }
    return (
        jinja_env(templates_dir(ctx), lang).get_template("instructor_report_standalone.html").render(context)
    )


def _attachment(event_code: str, ext: str) -> dict[str, str]:
    name = f"labserver-report-{event_code}-{clock.now():%Y%m%d-%H%M}.{ext}"
    return {"Content-Disposition": f'attachment; filename="{name}"'}


@api.get(
    "/events/{event_id}/report.json",
    response_class=Response,
    responses=json_file(ReportPublic, "The post-event report (an attachment)"),
    dependencies=[require(Action.report)],
)
def report_json(event_id: DbId, request: Request, ctx: Ctx, session: SessionDep) -> Response:
    """The post-event report as JSON, as a download."""
    event = get_event(session, event_id)
    data = report.event_report(ctx, session, event, lang=pick_lang(request))
    body = json.dumps(data.model_dump(mode="json"), ensure_ascii=False, indent=1)
    return Response(body, media_type="application/json", headers=_attachment(event.code, "json"))


@api.get(
    "/events/{event_id}/report.html",
    response_class=Response,
    responses=media("text/html", "The post-event report as one self-contained HTML file"),
    dependencies=[require(Action.report)],
)
def report_html(event_id: DbId, request: Request, ctx: Ctx, session: SessionDep) -> Response:
    """The post-event report as a self-contained HTML file, as a download."""
    event, key = _key(ctx, session, event_id)
    lang = pick_lang(request)
    data = report.event_report(ctx, session, event, lang=lang)
    html = standalone_html(ctx, data, key, lang)
    return Response(html, media_type="text/html; charset=utf-8", headers=_attachment(event.code, "html"))


@api.get(
    "/events/{event_id}/completion-key",
    response_model=CompletionKeyPublic,
    dependencies=[require(Action.view)],
)
def completion_key(event_id: DbId, ctx: Ctx, session: SessionDep) -> CompletionKeyPublic:
    """The public key that signs this event's completion records."""
    return _key(ctx, session, event_id)[1]


def report_context(
    request: Request, ctx: AppContext, session: Session, me: Acting, event_id: int
) -> dict[str, Any]:
    base = instructor_base(request, me, "instructor-report")
    event, key = _key(ctx, session, event_id)
    data = report.event_report(ctx, session, event, lang=base["lang"])
    return {**base, "report": data.model_dump(mode="json"), "key": key.model_dump()}


@pages.get("/events/{event_id}/report")
def report_page(
    event_id: DbId,
    request: Request,
    ctx: Ctx,
    session: SessionDep,
    me: Annotated[Acting, require(Action.report, page=True, audit=False)],  # reading it is no download
) -> HTMLResponse:
    """The post-event report: charts, per-step tables, timelines, downloads."""
    return render_page(ctx, "instructor_report.html", report_context(request, ctx, session, me, event_id))


router = APIRouter()
router.include_router(api)
router.include_router(pages)
