"""Structured logs: one JSON object per line (``LABSERVER_LOG__FORMAT=json``), each carrying the ids
of what it is about, so one attendee's trouble can be followed from the join to the check.

The ids travel in a :class:`LogContext` held by a context variable:

- the HTTP middleware (``labserver/edge/http_observe.py``) starts one per request or WebSocket with its
  ``request_id`` (the client's ``X-Request-ID`` when it is a short token, else a fresh one; sent
  back in the response's ``X-Request-ID``);
- code that learns more calls :func:`bind` in one line: the attendee (``routes/deps.py`` on every
  authenticated request, ``services/joining/events.join``), the environment (``services/provisioning/environments``).

The context is a *mutable object* shared by reference: FastAPI runs sync dependencies in worker
threads with a copy of the context, and a background task (an environment start begun at join)
gets a copy too; a plain ``ContextVar.set`` there would be lost on return, a field set on the shared
object is seen by the request and by every line it logs afterwards. Outside any request (the
housekeeping loop, a command) :func:`bind` does nothing: a context begun there would outlive the
work it describes (a thread's context lasts as long as the thread) and tag unrelated lines.

A line: ``{"ts", "level", "logger", "msg", "request_id", "event_id", "attendee_id", "env_id", ...
the record's ``extra`` fields, "exc"}``; ids that are unknown are left out."""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import re
import secrets
from dataclasses import asdict, dataclass
from typing import Any, Literal

REQUEST_ID_HEADER = "x-request-id"
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


@dataclass
class LogContext:
    request_id: str | None = None
    event_id: int | None = None
    attendee_id: int | None = None
    env_id: str | None = None


_current: contextvars.ContextVar[LogContext | None] = contextvars.ContextVar("labserver_log", default=None)


def request_id_from(header: str | None) -> str:
    """The client's request id when it is a short safe token (it ends up in logs), else a new one."""
    if header and _SAFE_ID.fullmatch(header):
        return header
    return secrets.token_hex(8)


def begin(request_id: str) -> contextvars.Token[LogContext | None]:
    """Start the context of one request; hand the token to :func:`end` when it is over."""
    return _current.set(LogContext(request_id=request_id))


def end(token: contextvars.Token[LogContext | None]) -> None:
    _current.reset(token)


def bind(**ids: Any) -> None:
    """Add ids (``event_id``, ``attendee_id``, ``env_id``) to the current request's context (none
    outside a request: nothing happens)."""
    ctx = _current.get()
    if ctx is None:
        return
    for key, value in ids.items():
        if value is not None:
            setattr(ctx, key, value)


def current() -> dict[str, Any]:
    """The ids known now (unknown ones left out)."""
    ctx = _current.get()
    return {} if ctx is None else {k: v for k, v in asdict(ctx).items() if v is not None}


#: attributes every LogRecord has: anything else on a record came from ``extra=``
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_STANDARD.add("color_message")  # uvicorn's copy of the message with terminal colours


_FIXED = ("ts", "level", "logger", "msg")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(current())
        for key, value in vars(record).items():  # a record's own ids win over the context's
            if key not in _STANDARD and not key.startswith("_") and key not in _FIXED:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def dict_config(fmt: Literal["text", "json"], level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the server: the root logger and uvicorn's loggers
    (access lines included) on stderr, as JSON lines or as text with the ids appended."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"()": TextFormatter, "fmt": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"labserver": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "labserver",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            name: {"handlers": [], "level": level.upper(), "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


class TextFormatter(logging.Formatter):
    """Plain text, with the known ids appended in brackets (``[request_id=… attendee_id=…]``)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = current()
        return f"{text} [{' '.join(f'{k}={v}' for k, v in ids.items())}]" if ids else text
