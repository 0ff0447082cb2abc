"""``GET /metrics``: the Prometheus text (``labserver/observability/metrics.py``), for an instructor (session
cookie or the instructor token as bearer), a scraper with ``LABSERVER_METRICS__TOKEN`` as bearer,
or a client whose address is in ``LABSERVER_METRICS__NETWORKS``. Anyone else gets 403: the figures
name labs, steps and routes, and their rates tell how a room is doing."""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from sqlmodel import Session

from labserver.observability import metrics
from labserver.routes.deps import Ctx, SessionDep, principal_from
from labserver.schemas import media
from labserver.services.operations.metrics_snapshot import snapshot
from labserver.services.staff.roles import Action, may


def _in_networks(host: str | None, networks: list[str]) -> bool:
    if not host or not networks:
        return False
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(n, strict=False) for n in networks)


def metrics_reader(request: Request, ctx: Ctx) -> None:
    conf = ctx.settings.metrics
    auth = request.headers.get("authorization") or ""
    bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    if conf.token and bearer and hmac.compare_digest(bearer.encode(), conf.token.encode()):
        return
    if _in_networks(request.client.host if request.client else None, conf.networks):
        return
    with Session(ctx.engine, expire_on_commit=False) as session:
        principal = principal_from(ctx, session, request.headers, request.cookies)
    if principal is not None and may(principal.grants, Action.server, None):
        return
    raise HTTPException(
        403,
        "Metrics are for organisers of every event and configured scrapers "
        "(LABSERVER_METRICS__TOKEN or __NETWORKS).",
    )


metrics_reader.action = Action.server  # type: ignore[attr-defined]  # the staff matrix reads it
router = APIRouter(tags=["instructor"], dependencies=[Depends(metrics_reader)])


@router.get(
    "/metrics",
    response_class=Response,
    include_in_schema=True,
    responses=media(metrics.CONTENT_TYPE, "Prometheus text format"),
)
async def metrics_text(ctx: Ctx, session: SessionDep) -> Response:
    """Server metrics in Prometheus text format (HTTP, environments, checks, terminals, streams, pool)."""
    return Response(metrics.render(await snapshot(ctx, session)), media_type=metrics.CONTENT_TYPE)
