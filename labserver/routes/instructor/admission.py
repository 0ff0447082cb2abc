"""Instructor routes for a room joining at once: the admission limit (environment starts at once,
read and changed at run time; services/provisioning/admission.py). ``/metrics`` is in routes/metrics.py."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from labserver.routes.deps import Ctx, require
from labserver.schemas import AdmissionPublic
from labserver.services.staff.roles import Action

#: the limit is the server's, not an event's: an organiser of every event reads and sets it
router = APIRouter(tags=["instructor"], dependencies=[require(Action.server)])


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
