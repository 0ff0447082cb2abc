"""Instructor routes for a room joining at once: the admission limit (environment starts at once,
read and changed at run time; services/admission.py) and ``/metrics`` (Prometheus text: database
pool waits, queue and start times; labserver/metrics.py)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from labserver import metrics
from labserver.routes.deps import Ctx, current_instructor
from labserver.schemas import AdmissionPublic, media

router = APIRouter(tags=["instructor"], dependencies=[Depends(current_instructor)])


class AdmissionIn(BaseModel):
    limit: int = Field(ge=1, le=1000)


@router.get("/api/v1/admission", response_model=AdmissionPublic)
def admission(ctx: Ctx) -> AdmissionPublic:
    """Environment starts allowed at once, running now, and waiting in the queue."""
    return AdmissionPublic(**ctx.admission.snapshot())


@router.put("/api/v1/admission", response_model=AdmissionPublic)
def set_admission(body: AdmissionIn, ctx: Ctx) -> AdmissionPublic:
    """Change how many environment starts run at once (takes effect now; the queue moves on)."""
    ctx.admission.set_limit(body.limit)
    return AdmissionPublic(**ctx.admission.snapshot())


@router.get(
    "/metrics",
    response_class=Response,
    include_in_schema=True,
    responses=media(metrics.CONTENT_TYPE, "Prometheus text format"),
)
def metrics_text() -> Response:
    """Server metrics in Prometheus text format (database pool waits, admission queue, start times)."""
    return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)
