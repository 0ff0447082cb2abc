"""The served OpenAPI describes the API: every attendee and instructor route has a description and a
response schema; every handler (pages and WebSockets too) has a docstring."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute

API_TAGS = {"attendee", "instructor"}


def _operations(app: FastAPI):  # type: ignore[no-untyped-def]
    for path, item in app.openapi()["paths"].items():
        for method, op in item.items():
            yield path, method, op


def test_every_api_route_has_a_description_and_a_response_schema(app: FastAPI) -> None:
    spec = app.openapi()
    assert spec["info"]["title"] == "labserver"
    seen_tags: set[str] = set()
    problems = []
    for path, method, op in _operations(app):
        tags = set(op.get("tags", []))
        if not tags & API_TAGS:
            continue
        seen_tags |= tags
        where = f"{method.upper()} {path}"
        if not op.get("description", "").strip():
            problems.append(f"{where}: no description (give the handler a docstring)")
        ok = {code: r for code, r in op["responses"].items() if code.startswith("2")}
        if not ok:
            problems.append(f"{where}: no success response")
        for code, response in ok.items():
            schemas = [c.get("schema") for c in response.get("content", {}).values()]
            if not schemas or not all(schemas):
                problems.append(f"{where}: response {code} has no schema (response_model= or responses=)")
    assert seen_tags >= API_TAGS
    assert not problems, "\n".join(problems)


def test_api_paths_of_the_design_are_served(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    for path in (
        "/api/v1/join",
        "/api/v1/labs",
        "/api/v1/labs/{lab_id}",
        "/api/v1/environment",
        "/api/v1/labs/{lab_id}/files",
        "/api/v1/labs/{lab_id}/files/{path}",
        "/api/v1/labs/{lab_id}/steps/{step_id}/check",
        "/api/v1/labs/{lab_id}/steps/{step_id}/runs",
        "/api/v1/help",
        "/api/v1/stream",
        "/api/v1/events",
        "/api/v1/events/{event_id}/progress",
        "/api/v1/events/{event_id}/stream",
        "/api/v1/events/{event_id}/export.csv",
        "/api/v1/events/{event_id}/export.json",
        "/api/v1/events/{event_id}/announcements",
        "/api/v1/environments/{env_id}/restart",
    ):
        assert path in paths, path


def _handlers(routes: list[Any]) -> list[APIRoute | APIWebSocketRoute]:
    out: list[APIRoute | APIWebSocketRoute] = []
    for route in routes:
        if isinstance(route, APIRoute | APIWebSocketRoute):
            out.append(route)
        included = getattr(route, "original_router", None) or getattr(route, "router", None)
        if included is not None and hasattr(included, "routes"):
            out += _handlers(list(included.routes))
    return out


def test_every_handler_has_a_docstring(app: FastAPI) -> None:
    handlers = _handlers(list(app.routes))
    assert len(handlers) > 50
    missing = [
        f"{route.path} ({route.endpoint.__module__}.{route.endpoint.__name__})"
        for route in handlers
        if not (route.endpoint.__doc__ or "").strip()
    ]
    assert not missing, "handlers without a docstring:\n" + "\n".join(missing)
