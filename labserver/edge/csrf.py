"""Cross-site request forgery: a cookie never authorises a request another site made.

Threat: attendee and instructor sessions are cookies. A page on another site (or on another port
of the same host, which SameSite treats as the same site) can make the victim's browser send a
POST, or open a WebSocket, to this server with those cookies attached: close an event, restart an
environment, reset a lab, type into a terminal.

Mechanism (OWASP's "verify origin with standard headers"): every state-changing request (any
method but GET, HEAD, OPTIONS) and every WebSocket handshake that carries a ``Cookie`` header must
come from this server's own origin. Browsers always send ``Origin`` on such requests (and on every
WebSocket handshake); when it is absent the ``Referer`` is compared instead. A request with
neither header comes from something that is not a browser (curl, the CLI, tests): it cannot have
been forged by a page, so it passes. Requests authenticated by ``Authorization: Bearer`` carry no
ambient credential and pass too. "Own origin" is the ``Host`` the request was sent to, plus the
origins the operator lists in ``LABSERVER_TRUSTED_ORIGINS`` (a proxy that rewrites ``Host``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc.lower() if parts.scheme in ("http", "https", "ws", "wss") else ""


def is_cross_site(headers: dict[str, str], trusted: Iterable[str] = ()) -> bool:
    """True when a cookie-carrying request names an origin other than the server's own.

    ``headers`` are lower-cased names. Pure: tested without a server."""
    if "cookie" not in headers or headers.get("authorization", "").lower().startswith("bearer "):
        return False
    claimed = headers.get("origin") or headers.get("referer")
    if claimed is None:
        return False  # not a browser: no page could have made this request
    own = {headers.get("host", "").lower(), *(_netloc(t) for t in trusted)}
    return _netloc(claimed) not in own or not _netloc(claimed)


class CSRFMiddleware:
    """Refuses cross-site state changes (403) and cross-site WebSocket handshakes (closed, 4403)."""

    def __init__(self, app: ASGIApp, trusted_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.trusted = tuple(trusted_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (kind == "http" and scope["method"] in SAFE_METHODS):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not is_cross_site(headers, self.trusted):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 4403, "reason": "cross-site request refused"})
            return
        body = json.dumps(
            {
                "detail": "This request came from another site and was refused. "
                "Reload the page from the workshop server and try again.",
                "reason": "cross-site",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
