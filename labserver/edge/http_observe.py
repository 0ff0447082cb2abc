"""Every HTTP request and WebSocket is observed by one ASGI middleware, :class:`RequestObserver`:

- a log context is begun with the request's id (``labserver/observability/logging_json.py``): the client's
  ``X-Request-ID`` when it is a short safe token, else a fresh one, sent back as ``X-Request-ID``;
- the time to the response's first byte is observed in
  ``labserver_http_request_duration_seconds{method, route, status}`` (``labserver/observability/metrics.py``).
  ``route`` is the matched route's template (``/api/v1/labs/{lab_id}``), never the path the client
  sent (a hostile client must not mint label values); a request no route matched is ``unmatched``.
  WebSockets get the log context only."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from labserver.observability import logging_json, metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def route_label(scope: Scope) -> str:
    """The template of the route the router matched, e.g. ``/api/v1/labs/{lab_id}``."""
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    if not isinstance(template, str):
        return "unmatched"
    root = scope.get("root_path", "") or ""
    return root + template if template.startswith("/") else template


class RequestObserver:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                header = value.decode("latin-1")
                break
        request_id = logging_json.request_id_from(header)
        token = logging_json.begin(request_id)
        if scope["type"] == "websocket":
            try:
                await self.app(scope, receive, send)
            finally:
                logging_json.end(token)
            return
        started = time.perf_counter()
        seen = False

        async def observed(message: Message) -> None:
            nonlocal seen
            if message["type"] == "http.response.start" and not seen:
                seen = True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
                metrics.HTTP_LATENCY.labels(
                    scope.get("method", ""), route_label(scope), str(message.get("status", 0))
                ).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            if not seen:  # the app raised before answering: the server answers 500
                metrics.HTTP_LATENCY.labels(scope.get("method", ""), route_label(scope), "500").observe(
                    time.perf_counter() - started
                )
            logging_json.end(token)
