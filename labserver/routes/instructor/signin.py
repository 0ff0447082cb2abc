"""Signing in and out of the staff pages (``/instructor``): a one-time link, a name and password,
the organisation's OpenID Connect provider, or the bootstrap instructor token (while it is on).
Every way ends in the same signed, HttpOnly cookie (:func:`~labserver.routes.deps.make_staff_cookie`
or, for the token, :func:`~labserver.routes.deps.make_instructor_cookie`).

- ``GET  /instructor/login``: the form (the ways this server offers)
- ``POST /instructor/login``: a name and password, or the instructor token
- ``GET  /instructor/signin/{secret}``: a page with one button (a link previewer's GET uses nothing)
- ``POST /instructor/signin/{secret}``: use the one-time link
- ``GET  /instructor/oidc/login`` and ``/instructor/oidc/callback``: the provider's round trip
- ``POST /instructor/logout``: the session ends (its streams within seconds), the cookie goes"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from labserver.i18n import gettext, pick_lang
from labserver.routes.deps import (
    INSTRUCTOR_COOKIE,
    Ctx,
    make_instructor_cookie,
    make_staff_cookie,
    staff_secret,
)
from labserver.routes.pages import base_context, render_page, safe_next
from labserver.services.context import AppContext
from labserver.services.staff import accounts, oidc
from labserver.services.staff.accounts import StaffError

log = logging.getLogger(__name__)
router = APIRouter(prefix="/instructor", include_in_schema=False, tags=["instructor-pages"])
FormStr = Annotated[str, Form()]
Context = dict[str, Any]


def login_context(request: Request, ctx: AppContext, error: str = "", name: str = "") -> Context:
    base = base_context(request, None, "instructor-login")
    return {
        **base,
        "instructor": None,
        "next": safe_next(request.query_params.get("next", "/instructor"), "/instructor"),
        "error": error,
        "name": name,
        "token_on": ctx.settings.staff.bootstrap_token and bool(ctx.settings.instructor_token),
        "oidc_name": ctx.settings.staff.oidc.name if ctx.settings.staff.oidc.issuer else "",
    }


def _signed_in(ctx: AppContext, cookie: str, next_url: str) -> RedirectResponse:
    resp = RedirectResponse(safe_next(next_url, "/instructor"), status_code=303)
    resp.set_cookie(
        INSTRUCTOR_COOKIE,
        cookie,
        httponly=True,
        samesite="lax",
        max_age=int(ctx.settings.staff.session_hours * 3600),
    )
    return resp


@router.get("/login")
def login_page(request: Request, ctx: Ctx) -> HTMLResponse:
    """The staff sign-in form."""
    return render_page(ctx, "instructor_login.html", login_context(request, ctx))


@router.post("/login")
def login(
    request: Request,
    ctx: Ctx,
    token: FormStr = "",
    name: FormStr = "",
    password: FormStr = "",
    next: FormStr = "/instructor",
) -> Response:
    """Sign in with a name and password, or with the instructor token."""
    lang = pick_lang(request)
    name = " ".join(name.split())[:80]
    if token:
        expected = ctx.settings.instructor_token
        if (
            ctx.settings.staff.bootstrap_token
            and expected
            and hmac.compare_digest(token.strip().encode(), expected.encode())
        ):
            return _signed_in(ctx, make_instructor_cookie(ctx, name or "instructor"), next)
        error = gettext(lang, "That is not the instructor token.")
        if not ctx.settings.staff.bootstrap_token:
            error = gettext(lang, "The instructor token is turned off on this server: sign in as yourself.")
    else:
        with Session(ctx.engine, expire_on_commit=False) as session:
            try:
                _staff, secret = accounts.sign_in_with_password(
                    session, name, password, hours=ctx.settings.staff.session_hours
                )
            except StaffError as exc:
                error = gettext(lang, exc.message).format(**exc.params)
            else:
                return _signed_in(ctx, make_staff_cookie(ctx, secret), next)
    context = login_context(request, ctx, error, name)
    context["next"] = safe_next(next, "/instructor")
    return render_page(ctx, "instructor_login.html", context, status_code=403)


@router.get("/signin/{secret}")
def signin_page(secret: str, request: Request, ctx: Ctx) -> HTMLResponse:
    """The one-time link's page: one button, so a link previewer's GET does not use the link."""
    context = {**base_context(request, None, "instructor-signin"), "instructor": None, "secret": secret[:200]}
    return render_page(ctx, "instructor_signin.html", context)


@router.post("/signin/{secret}")
def signin(secret: str, request: Request, ctx: Ctx) -> Response:
    """Use a one-time sign-in link."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        try:
            _staff, session_secret = accounts.sign_in_with_link(
                session, secret[:200], hours=ctx.settings.staff.session_hours
            )
        except StaffError as exc:
            context = login_context(
                request, ctx, gettext(pick_lang(request), exc.message).format(**exc.params)
            )
            return render_page(ctx, "instructor_login.html", context, status_code=403)
    return _signed_in(ctx, make_staff_cookie(ctx, session_secret), "/instructor")


@router.post("/logout")
def logout(request: Request, ctx: Ctx) -> RedirectResponse:
    """End this session (its streams close within seconds) and forget the cookie."""
    secret = staff_secret(ctx, request.cookies)
    if secret:
        with Session(ctx.engine) as session:
            accounts.end_session(session, secret)
        ctx.staff_watch.poke(ctx.loop)
    resp = RedirectResponse("/instructor/login", status_code=303)
    resp.delete_cookie(INSTRUCTOR_COOKIE)
    return resp


# -- OpenID Connect -----------------------------------------------------------------------------------
def _client(ctx: AppContext) -> Any:
    client = ctx.oidc
    if client is None:
        raise HTTPException(404, "OpenID Connect sign-in is not configured on this server.")
    return client


@router.get("/oidc/login")
async def oidc_login(request: Request, ctx: Ctx) -> Response:
    """Off to the organisation's provider (state and nonce kept in a short signed cookie)."""
    client = _client(ctx)
    request.session["next"] = safe_next(request.query_params.get("next", "/instructor"), "/instructor")
    redirect_uri = str(request.url_for("oidc_callback"))
    response: Response = await client.authorize_redirect(request, redirect_uri)
    return response


@router.get("/oidc/callback", name="oidc_callback")
async def oidc_callback(request: Request, ctx: Ctx) -> Response:
    """Back from the provider: the ID token is verified, its claims give the account and roles."""
    # installed with labserver (Authlib and its joserfc); imported where OpenID Connect is used
    from authlib.integrations.base_client import OAuthError
    from joserfc.errors import JoseError

    client = _client(ctx)
    lang = pick_lang(request)
    conf = ctx.settings.staff.oidc
    try:
        token = await client.authorize_access_token(request)
    except (OAuthError, JoseError, httpx.HTTPError) as exc:  # refused, a bad token, the provider down
        log.warning("OpenID Connect sign-in failed: %s", exc)
        context = login_context(
            request, ctx, gettext(lang, "The sign-in with your organisation failed: try again.")
        )
        return render_page(ctx, "instructor_login.html", context, status_code=403)
    claims = dict(token.get("userinfo") or {})
    metadata = await client.load_server_metadata()

    def sign_in() -> str:
        with Session(ctx.engine, expire_on_commit=False) as session:
            _staff, secret = oidc.sign_in(
                session,
                issuer=str(metadata.get("issuer", conf.issuer)),
                claims=claims,
                rules=oidc.rules_of(conf),
                hours=ctx.settings.staff.session_hours,
                provider=conf.name,
            )
            return secret

    try:
        secret = await run_in_threadpool(sign_in)
    except StaffError as exc:
        context = login_context(request, ctx, gettext(lang, exc.message).format(**exc.params))
        return render_page(ctx, "instructor_login.html", context, status_code=403)
    return _signed_in(ctx, make_staff_cookie(ctx, secret), str(request.session.pop("next", "/instructor")))
