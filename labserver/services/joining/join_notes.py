"""What the server saw at each join, in memory only: the browser's user agent and an address key (an
HMAC of the client address under the server's secret key, 12 hex digits), never the address. Held
by the app's context; read by :mod:`labserver.services.joining.join_watch` (the instructor's join list)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field


@dataclass
class JoinNote:
    user_agent: str
    address_key: str


@dataclass
class JoinWatch:
    """What the server saw at each join (in memory: see the module docstring)."""

    notes: dict[int, JoinNote] = field(default_factory=dict)  # attendee id -> note

    def record(self, secret: str, *, attendee_id: int, user_agent: str, address: str | None) -> None:
        key = ""
        if address:
            key = hmac.new(secret.encode(), address.encode(), hashlib.sha256).hexdigest()[:12]
        self.notes[attendee_id] = JoinNote(user_agent=user_agent[:300], address_key=key)

    def forget(self, attendee_id: int) -> None:
        self.notes.pop(attendee_id, None)
