"""Attendee pages (Jinja2). Placeholder until the attendee UI lands: the JSON API is complete."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import RedirectResponse

router = APIRouter(include_in_schema=False)


@router.get("/")
def index() -> RedirectResponse:
    return RedirectResponse("/api/v1/docs")
