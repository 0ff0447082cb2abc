"""Signatures on progress files (schema version 2): who may turn an uploaded file into progress.

An export is signed with an HMAC-SHA256 under a key derived from this server's secret key
(:meth:`labserver.config.Settings.ensure_secret_key`). The signed bytes are the canonical JSON of the
whole file without its ``signature`` member (keys sorted, no spaces, UTF-8), so the signature binds
the learner's identity (``attendee``: name, event code, attendee id), every lab and step and every
file in it. ``signature`` is ``{"alg": "HMAC-SHA256", "key_id": ..., "value": hex}``; ``key_id`` only
names the key (a hash of it).

:func:`trust_of` answers one question: was this file made by *this* server for *this* attendee
(``"own"``)? Everything else (another server, another attendee, an edited file, an unsigned version
1 file) is ``"foreign"``. What a foreign file may do is the importer's policy
(:mod:`labserver.services.reporting.progress_io`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Literal

ALG = "HMAC-SHA256"
_PURPOSE = b"labserver progress file signature v2"

Trust = Literal["own", "foreign"]


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode("utf-8"), _PURPOSE, hashlib.sha256).digest()


def key_id(secret: str) -> str:
    return hashlib.sha256(_key(secret)).hexdigest()[:16]


def canonical(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign(doc: dict[str, Any], secret: str) -> dict[str, str]:
    """The ``signature`` member for ``doc`` (a JSON-ready dict; its own ``signature`` is ignored)."""
    value = hmac.new(_key(secret), canonical(doc), hashlib.sha256).hexdigest()
    return {"alg": ALG, "key_id": key_id(secret), "value": value}


def valid(doc: dict[str, Any], secret: str) -> bool:
    """Whether ``doc`` carries a signature made with ``secret`` over exactly its content."""
    sig = doc.get("signature")
    if not isinstance(sig, dict) or sig.get("alg") != ALG or not isinstance(sig.get("value"), str):
        return False
    want = hmac.new(_key(secret), canonical(doc), hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, sig["value"])


def trust_of(doc: dict[str, Any], secret: str, *, identity: dict[str, Any]) -> Trust:
    """``"own"`` when ``doc`` is signed with this server's key and its ``attendee`` matches every
    field of ``identity`` (an event server: event code and attendee id; a self-paced laptop, whose
    database may have been recreated with a new event code: the learner's name)."""
    who = doc.get("attendee")
    if not valid(doc, secret) or not isinstance(who, dict):
        return "foreign"
    return "own" if all(who.get(k) == v for k, v in identity.items()) else "foreign"
