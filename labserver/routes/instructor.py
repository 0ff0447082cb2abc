"""The instructor's room: one ``router`` (included by ``create_app``) made of the JSON API
(:mod:`labserver.routes.instructor_api` and :mod:`labserver.routes.instructor_joins`, under
``/api/v1``, tag ``instructor``) and the pages
(:mod:`labserver.routes.instructor_pages`, under ``/instructor``), the post-event report
(:mod:`labserver.routes.report`, both); the live gallery's page and stream are
:mod:`labserver.routes.instructor_gallery`. The read-only terminal view's
WebSocket lives in :mod:`labserver.routes.terminal`."""

from __future__ import annotations

from fastapi import APIRouter

from labserver.routes import (
    instructor_admission,
    instructor_api,
    instructor_gallery,
    instructor_joins,
    instructor_pages,
    report,
)

router = APIRouter()
router.include_router(instructor_api.router)
router.include_router(instructor_joins.router)
router.include_router(instructor_admission.router)
router.include_router(instructor_pages.router)
router.include_router(instructor_gallery.api)
router.include_router(instructor_gallery.pages)
router.include_router(report.router)
