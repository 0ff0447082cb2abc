"""Verifiable completion: a record, signed by the event, that an attendee finished a lab; anyone can
check one offline with ``labserver verify FILE --key KEY``.

Threat model. The attendee holds the record and may edit it; a third party (an employer, a course)
holds only the record and the event's public key, copied from the event's page. The record must
then prove that *this event's server* saw *every step* of the lab pass for this attendee, with the
times and the digests of the files its checks judged.

Mechanism.

- **Why Ed25519 beside the HMAC of progress files** (:mod:`labserver.services.reporting.progress_signing`):
  an HMAC can be checked only by whoever holds the secret, so only this server could check it, and
  anyone able to check it could forge it. A completion record is checked by others, offline:
  that needs a public key. The canonical bytes are the progress files' ones
  (:func:`~labserver.services.reporting.progress_signing.canonical`: the JSON without ``signature``, keys
  sorted, no spaces, UTF-8), defined once.
- **One key per event**, derived (HMAC-SHA256 of the server's secret key over the event id and its
  creation time) rather than stored: no private key sits in the database or in a backup of it, a
  restarted server (or a second replica with the same ``LABSERVER_SECRET_KEY``) signs with the same
  key, and events never share one. The public key is shown on the event's pages and served by
  ``GET /api/v1/completion-key``. Rotating the secret key changes every event's key (records
  already issued still verify against the key published when they were issued).
- **No record for a step that did not pass**: :func:`build_record` refuses (raises
  :class:`CompletionRefused`) unless every step of the lab has a ``passed`` check run of this
  attendee in this event's database. An ``imported`` step (from a progress file) is not a pass.
  The record carries, per step, the first passing run's id and time, the finished checks before
  it, and the digests of the lab folder that run judged (:mod:`labserver.services.grading.check_files`).
- :func:`verify` is pure: the format, the signature over the canonical bytes, the signer among the
  keys the verifier trusts, and the shape of every step (each one passed). A record edited after
  signing, signed by another key, or with a step not passed fails.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlmodel import Session, col, select

from labserver import __version__, clock
from labserver.content import Lab
from labserver.models import Attendee, CheckFiles, CheckRun, CheckStatus, Event, HintOpen, StepStart
from labserver.schemas import CompletionKeyPublic
from labserver.services.reporting.progress_signing import canonical

FORMAT = "labserver-completion"
SCHEMA_VERSION = 1
ALG = "Ed25519"
_PURPOSE = b"labserver completion record ed25519 v1"


class CompletionRefused(Exception):
    """No record can be made (the lab is not finished); ``str(exc)`` is the message for people."""


# -- keys -------------------------------------------------------------------------------------------
def _created(event: Event) -> int:
    t = event.created_at
    return int((t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp())


def event_private_key(event: Event, secret: str) -> Ed25519PrivateKey:
    """The event's signing key (derived, never stored: module docstring)."""
    msg = _PURPOSE + f"|event={event.id}|created={_created(event)}".encode()
    seed = hmac.new(secret.encode("utf-8"), msg, hashlib.sha256).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id_of(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).hexdigest()[:16]


def public_key(event: Event, secret: str) -> CompletionKeyPublic:
    raw = _raw(event_private_key(event, secret).public_key())
    return CompletionKeyPublic(alg=ALG, key_id=key_id_of(raw), public_key=base64.b64encode(raw).decode())


# -- issuing ----------------------------------------------------------------------------------------
def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def build_record(
    session: Session, *, event: Event, attendee: Attendee, lab: Lab, secret: str
) -> dict[str, Any]:
    """The signed completion record of ``attendee`` for ``lab``; raises :class:`CompletionRefused`
    when a step has no passing check run (module docstring)."""
    runs = session.exec(
        select(CheckRun)
        .where(CheckRun.event_id == event.id, CheckRun.attendee_id == attendee.id, CheckRun.lab_id == lab.id)
        .order_by(col(CheckRun.id))
    ).all()
    opened = {
        s.step_id: _aware(s.started_at)
        for s in session.exec(
            select(StepStart).where(StepStart.attendee_id == attendee.id, StepStart.lab_id == lab.id)
        ).all()
    }
    hinted = {
        h.step_id
        for h in session.exec(
            select(HintOpen).where(HintOpen.attendee_id == attendee.id, HintOpen.lab_id == lab.id)
        ).all()
    }
    steps: list[dict[str, Any]] = []
    for step in lab.steps:
        mine = [r for r in runs if r.step_id == step.id]
        first = next((r for r in mine if r.status == CheckStatus.passed), None)
        if first is None or first.id is None:
            imported = any(r.status == CheckStatus.imported for r in mine)
            why = (
                "was imported from a progress file: press Check on it here to confirm it"
                if imported
                else "has not passed yet"
            )
            raise CompletionRefused(
                f"There is no completion record for {lab.id} yet: step {step.index + 1} "
                f"({step.spec.title.get('en')}) {why}. Every step must pass its check on this server."
            )
        before = [
            r
            for r in mine
            if r.id is not None and r.id < first.id and r.status not in ("running", "interrupted")
        ]
        started = min([t for t in (opened.get(step.id), _aware(mine[0].created_at)) if t is not None])
        files = session.get(CheckFiles, first.id)
        steps.append(
            {
                "id": step.id,
                "title": step.spec.title.get("en"),
                "started_at": started.isoformat(),
                "passed_at": _aware(first.finished_at or first.created_at).isoformat(),
                "attempts": len(before) + 1,
                "hints_opened": step.id in hinted,
                "run_id": first.id,
                "files": files.files if files is not None else [],
            }
        )
    doc: dict[str, Any] = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "issued_at": clock.now().isoformat(),
        "labserver_version": __version__,
        "event": {"id": event.id, "code": event.code, "title": event.title},
        "attendee": {"id": attendee.id, "name": attendee.name},
        "lab": {"id": lab.id, "title": lab.spec.title.get("en"), "steps": len(lab.steps)},
        "started_at": min(s["started_at"] for s in steps),
        "finished_at": max(s["passed_at"] for s in steps),
        "steps": steps,
    }
    doc["signature"] = sign(doc, event_private_key(event, secret))
    return doc


def sign(doc: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, str]:
    """The ``signature`` member for ``doc`` (its own ``signature`` is ignored)."""
    raw = _raw(key.public_key())
    return {
        "alg": ALG,
        "key_id": key_id_of(raw),
        "public_key": base64.b64encode(raw).decode(),
        "value": base64.b64encode(key.sign(canonical(doc))).decode(),
    }


def dump_record(doc: dict[str, Any]) -> str:
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


# -- verifying (offline) ----------------------------------------------------------------------------
@dataclass
class Verdict:
    """What :func:`verify` found: ``valid`` (the signature holds over exactly this content and every
    step passed), ``trusted`` (signed by one of the keys given; None when none was given)."""

    valid: bool
    trusted: bool | None
    key_id: str = ""
    problems: list[str] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return self.valid and self.trusted is True


def _b64(value: object, size: int) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if len(data) == size else None


def parse_key(text: str) -> bytes:
    """A public key as shown on the event's page (base64 of 32 bytes); raises ValueError."""
    raw = _b64(text.strip(), 32)
    if raw is None:
        raise ValueError(
            f"{text.strip()[:60]!r} is not an Ed25519 public key: copy the whole key (44 characters "
            "ending in '=') from the event's page."
        )
    return raw


def _steps_problems(doc: dict[str, Any]) -> list[str]:
    lab = doc.get("lab")
    steps = doc.get("steps")
    if not isinstance(lab, dict) or not isinstance(steps, list) or not steps:
        return ["the record names no lab or no steps"]
    problems = []
    if lab.get("steps") != len(steps):
        problems.append(f"the lab has {lab.get('steps')} steps but the record lists {len(steps)}")
    for i, step in enumerate(steps, start=1):
        if not isinstance(step, dict) or not isinstance(step.get("passed_at"), str) or not step.get("run_id"):
            problems.append(f"step {i} is not recorded as passed")
    return problems


def verify(doc: object, trusted_keys: list[bytes] | None = None) -> Verdict:
    """Check a completion record (module docstring); never raises on a bad record."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return Verdict(
            False, None, problems=[f'this is not a completion record ("format" is not "{FORMAT}")']
        )
    if doc.get("schema_version") != SCHEMA_VERSION:
        return Verdict(
            False, None, problems=[f"schema version {doc.get('schema_version')!r} is not {SCHEMA_VERSION}"]
        )
    sig = doc.get("signature")
    if not isinstance(sig, dict) or sig.get("alg") != ALG:
        return Verdict(False, None, problems=["the record carries no Ed25519 signature"])
    raw = _b64(sig.get("public_key"), 32)
    value = _b64(sig.get("value"), 64)
    if raw is None or value is None:
        return Verdict(False, None, problems=["the signature or its public key is malformed"])
    kid = key_id_of(raw)
    problems = []
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(value, canonical(doc))
    except InvalidSignature:
        problems.append(
            "the signature does not match the content: the record was changed after it was signed"
        )
    problems += _steps_problems(doc)
    valid = not problems
    trusted = None if trusted_keys is None else raw in trusted_keys
    if trusted is False:
        problems.append(f"it is signed by key {kid}, which is not the key you gave (--key)")

    def part(name: str) -> dict[str, Any]:
        value = doc.get(name)
        return value if isinstance(value, dict) else {}

    lab, who, ev = part("lab"), part("attendee"), part("event")
    summary = (
        f"{who.get('name')!s} finished lab {lab.get('id')!s} ({len(doc.get('steps') or [])} steps) "
        f"at event {ev.get('title')!s} ({ev.get('code')!s}), {doc.get('finished_at')!s}"
    )
    return Verdict(valid, trusted, key_id=kid, problems=problems, summary=summary)
