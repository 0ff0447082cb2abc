"""Attendee pages (Jinja2, one template per page, partials start with ``_``).

Routes are thin: each page's context is built by one function (``join_context``, ``labs_context``,
``lab_context``) that tests call directly; the template only lays it out. Everything the pages do
after loading goes through the JSON API (``/api/v1``) from small JS modules in ``web/static/js``.

Translation: one Jinja2 environment per language with the i18n extension and the language's Babel
catalog (:func:`labserver.i18n.translations`), so templates use ``{% trans %}`` and ``_()``. The
language comes from :func:`labserver.i18n.pick_lang`; the switch on every page sets the cookie
``labserver_lang`` (route ``/lang/{lang}``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from labserver import __version__
from labserver.content import Lab
from labserver.i18n import LANG_NAMES, LANGS, pick_lang, translations
from labserver.routes.deps import LANG_COOKIE, Ctx, OptionalAttendee, SessionDep
from labserver.schemas import EnvironmentPublic, LabSummaryPublic, StepPublic
from labserver.services.context import AppContext
from labserver.services.provisioning import environments
from labserver.services.reporting import completion, progress

router = APIRouter(include_in_schema=False)

Context = dict[str, Any]


@functools.cache
def jinja_env(templates_dir: Path, lang: str) -> jinja2.Environment:
    """The template environment of one language (built once per folder and language)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        autoescape=jinja2.select_autoescape(["html"]),
        extensions=["jinja2.ext.i18n"],
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.install_gettext_translations(translations(lang), newstyle=True)  # type: ignore[attr-defined]
    return env


def templates_dir(ctx: AppContext) -> Path:
    return ctx.settings.web_dir / "templates"


def render_page(ctx: AppContext, template: str, context: Context, status_code: int = 200) -> HTMLResponse:
    html = jinja_env(templates_dir(ctx), context["lang"]).get_template(template).render(context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


def safe_next(value: str, default: str = "/labs") -> str:
    """Only local paths are followed after joining or switching language (no open redirect)."""
    if value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return default


def base_context(request: Request, me: Any, page: str) -> Context:
    """What every page has: language, the language switch, who is signed in, the asset version."""
    lang = pick_lang(request)
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "lang"])
    here = request.url.path + (f"?{query}" if query else "")
    return {
        "page": page,
        "lang": lang,
        "langs": [
            {
                "code": code,
                "name": LANG_NAMES[code],
                "current": code == lang,
                "href": f"/lang/{code}?next={quote(here)}",
            }
            for code in LANGS
        ],
        "me": {"name": me.attendee.name, "id": me.id} if me else None,
        "event": {"title": me.event.title, "code": me.event.code} if me else None,
        "selfpaced": bool(me and me.event.selfpaced),
        "version": __version__,
    }


def join_context(request: Request, me: Any) -> Context:
    return {
        **base_context(request, me, "join"),
        "next": safe_next(request.query_params.get("next", "/labs")),
        "code": request.query_params.get("code", ""),
    }


def labs_context(request: Request, ctx: AppContext, session: Session, me: Any) -> Context:
    """The lab list: each lab with the attendee's progress; broken labs listed as unavailable."""
    base = base_context(request, me, "labs")
    lang = base["lang"]
    labs = []
    for lab_id in environments.event_labs(ctx, me.event):
        lab = ctx.catalog.labs[lab_id]
        prog = progress.lab_progress(session, event=me.event, attendee_id=me.id, lab=lab)
        labs.append(
            {
                **LabSummaryPublic.of(lab, lang).model_dump(),
                "available": True,
                "passed": prog.passed,
                "total": len(prog.steps),
                "done": prog.passed == len(prog.steps),
                "href": f"/labs/{lab.id}",
            }
        )
    wanted = me.event.labs or list(ctx.catalog.broken)
    unavailable = [
        {
            "id": lab_id,
            "available": False,
            "problems": [str(p) for p in ctx.catalog.broken[lab_id].problems],
        }
        for lab_id in wanted
        if lab_id in ctx.catalog.broken
    ]
    key = completion.public_key(me.event, ctx.settings.ensure_secret_key())
    return {**base, "labs": labs, "unavailable": unavailable, "completion_key": key.model_dump()}


def pick_step(lab: Lab, steps: list[Context], wanted: str) -> str:
    """The step to show: the one asked for, else the first open step not yet passed, else the first."""
    ids = [s["id"] for s in steps]
    if wanted in ids:
        return wanted
    for s in steps:
        if not s["locked"] and s["status"] != "passed":
            return str(s["id"])
    return ids[0]


def lab_context(request: Request, ctx: AppContext, session: Session, me: Any, lab: Lab) -> Context:
    """The lab page: steps (instructions, hints, status), the current step, the environment, and the
    small JSON config the page's JS modules start from."""
    base = base_context(request, me, "lab")
    lang = base["lang"]
    prog = progress.lab_progress(session, event=me.event, attendee_id=me.id, lab=lab)
    by_id = {sp.id: sp for sp in prog.steps}
    steps = []
    for step in lab.steps:
        sp = by_id[step.id]
        detail = StepPublic.of(lab, step, lang, sp.locked).model_dump()
        steps.append(
            {**detail, "status": sp.status, "attempts": sp.attempts, "last_message": sp.last_message}
        )
    current = pick_step(lab, steps, request.query_params.get("step", ""))
    env = EnvironmentPublic.of(environments.get_row(session, me.attendee)).model_dump(exclude_none=True)
    return {
        **base,
        "lab": LabSummaryPublic.of(lab, lang).model_dump(),
        "steps": steps,
        "current": current,
        "passed": prog.passed,
        "total": len(steps),
        "env": env,
        "recording": {"enabled": ctx.settings.recording.enabled, "input": me.event.record_input},
        "config": {
            "lab": lab.id,
            "step": current,
            "steps": [{"id": s["id"], "status": s["status"], "locked": s["locked"]} for s in steps],
            "total": len(steps),
            "attendee": me.id,
            "dev": bool(ctx.dev_labs),  # serve --dev: lab.changed refreshes the step text
        },
    }


def error_context(request: Request, me: Any, title: str, message: str) -> Context:
    return {**base_context(request, me, "error"), "title": title, "message": message}


def to_join(request: Request) -> RedirectResponse:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/join?next={quote(here)}", status_code=303)


@router.get("/")
def index(me: OptionalAttendee) -> RedirectResponse:
    """Straight to the lab list, or to the join page when not joined yet."""
    return RedirectResponse("/labs" if me else "/join", status_code=303)


@router.get("/join")
def join_page(request: Request, ctx: Ctx, me: OptionalAttendee) -> HTMLResponse:
    """The join page: event code and name."""
    return render_page(ctx, "join.html", join_context(request, me))


@router.get("/labs")
def labs_page(request: Request, ctx: Ctx, session: SessionDep, me: OptionalAttendee) -> Response:
    """The lab list with my progress."""
    if me is None:
        return to_join(request)
    return render_page(ctx, "labs.html", labs_context(request, ctx, session, me))


@router.get("/labs/{lab_id}")
def lab_page(lab_id: str, request: Request, ctx: Ctx, session: SessionDep, me: OptionalAttendee) -> Response:
    """A lab: steps with Check, hints and history, terminal and editor."""
    if me is None:
        return to_join(request)
    lab = ctx.catalog.get(lab_id)
    if lab is None or lab_id not in environments.event_labs(ctx, me.event):
        lang = pick_lang(request)
        _ = translations(lang).gettext
        broken = ctx.catalog.broken.get(lab_id)
        if broken is not None:
            if ctx.dev_labs:  # the author reads this page: every problem, and it reloads once fixed
                context = error_context(
                    request,
                    me,
                    _("This lab is unavailable"),
                    _("Fix the problems below and save: this page reloads when the lab loads again."),
                )
                context["problems"] = [str(p) for p in broken.problems]
                context["dev_lab"] = lab_id
                return render_page(ctx, "error.html", context, status_code=503)
            reason = "; ".join(str(p) for p in broken.problems)
            context = error_context(
                request, me, _("This lab is unavailable"), _("Its files have a problem; tell the instructor.")
            )
            context["detail"] = reason
            return render_page(ctx, "error.html", context, status_code=503)
        context = error_context(request, me, _("No such lab"), _("This event has no lab with that name."))
        return render_page(ctx, "error.html", context, status_code=404)
    return render_page(ctx, "lab.html", lab_context(request, ctx, session, me, lab))


@router.get("/lang/{lang}")
def switch_language(lang: str, request: Request) -> RedirectResponse:
    """Switch the UI language (cookie) and go back to the page."""
    target = safe_next(request.query_params.get("next", "/"), "/")
    resp = RedirectResponse(target, status_code=303)
    if lang in LANGS:
        resp.set_cookie(LANG_COOKIE, lang, max_age=365 * 24 * 3600, samesite="lax")
    return resp
