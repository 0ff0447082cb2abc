"""The instructor's room: one ``router`` (included by ``create_app``) made of the JSON API
(:mod:`labserver.routes.instructor.api` and :mod:`labserver.routes.instructor.joins`, under
``/api/v1``, tag ``instructor``) and the pages
(:mod:`labserver.routes.instructor.pages`, under ``/instructor``), the event's staff and audit log
(:mod:`labserver.routes.instructor.staff`), signing in and out (:mod:`labserver.routes.instructor.signin`),
the post-event report
(:mod:`labserver.routes.instructor.report`, both); the live gallery's page and stream are
:mod:`labserver.routes.instructor.gallery`. The read-only terminal view's
WebSocket lives in :mod:`labserver.routes.terminal`."""

from __future__ import annotations

from fastapi import APIRouter

from labserver.routes.instructor import admission, api, gallery, joins, pages, report, signin, staff

router = APIRouter()
router.include_router(api.router)
router.include_router(joins.router)
router.include_router(admission.router)
router.include_router(pages.router)
router.include_router(gallery.api)
router.include_router(gallery.pages)
router.include_router(report.router)
router.include_router(staff.router)
router.include_router(signin.router)
