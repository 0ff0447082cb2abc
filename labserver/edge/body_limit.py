"""Request bodies are capped before they are read: an ASGI middleware refuses a body over its
route's limit with 413 and a message that says the limit, from ``Content-Length`` before reading
anything, else as soon as the streamed bytes pass it (the app's ``await request.body()`` never
holds more than the limit). Limits by route:

- an editor save (``PUT /api/v1/labs/<lab>/files/<path>``): 2 MB (the editor's own limit) + slack;
- a progress import (``POST /api/v1/progress/import``): :data:`IMPORT_MAX`;
- the instructor's lab or event forms and every JSON body: :data:`DEFAULT_MAX`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection

from labserver.i18n import gettext, pick_lang

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MB = 1024 * 1024
FILE_MAX = 2 * MB + 64 * 1024  # the editor's 2 MB (routes/api.py answers the exact limit) + headroom
IMPORT_MAX = 16 * MB  # a progress file with its lab files (text, base64)
DEFAULT_MAX = 256 * 1024  # JSON bodies and forms

_FILE_PUT = re.compile(r"^/api/v1/labs/[^/]+/files/")
_IMPORT = "/api/v1/progress/import"


def limit_for(method: str, path: str) -> int:
    if method == "PUT" and _FILE_PUT.match(path):
        return FILE_MAX
    if method == "POST" and path == _IMPORT:
        return IMPORT_MAX
    return DEFAULT_MAX


def _detail(limit: int, lang: str) -> str:
    size = f"{limit / MB:.0f} MB" if limit >= MB else f"{limit // 1024} KB"
    return gettext(
        lang, "The request body is too big (at most {size} here). Send less: use the terminal for big files."
    ).format(size=size)


class BodyTooBig(HTTPException):
    """Raised from ``receive``: an HTTPException so that FastAPI's body parsing passes it on as 413
    (any other exception there becomes 400 "There was an error parsing the body")."""

    def __init__(self, limit: int, lang: str) -> None:
        super().__init__(413, _detail(limit, lang))


def _message(limit: int, lang: str) -> bytes:
    return json.dumps({"detail": _detail(limit, lang), "code": "body-too-big", "limit": limit}).encode()


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"])
        lang = pick_lang(HTTPConnection(scope))
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit:
                    await _refuse(send, limit, lang)
                    return
        received = 0
        started = False

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooBig(limit, lang)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, capped_receive, tracking_send)
        except BodyTooBig:
            if not started:
                await _refuse(send, limit, lang)


async def _refuse(send: Send, limit: int, lang: str) -> None:
    body = _message(limit, lang)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
