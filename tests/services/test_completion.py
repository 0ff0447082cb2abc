"""Completion records, verified offline: an intact record signed by the event's key passes; a record
changed after signing, signed by another key, with a step taken out or not passed, fails."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from labserver.models import Event
from labserver.services.reporting import completion

SECRET = "test-secret"


def _event(event_id: int = 1) -> Event:
    import datetime as dt

    return Event(id=event_id, code="EV", title="Event", created_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))


def _record(event: Event) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": completion.FORMAT,
        "schema_version": completion.SCHEMA_VERSION,
        "issued_at": "2026-12-01T12:00:00+00:00",
        "labserver_version": "0.1.0",
        "event": {"id": event.id, "code": event.code, "title": event.title},
        "attendee": {"id": 7, "name": "Ada"},
        "lab": {"id": "getting-started", "title": "Getting started", "steps": 2},
        "started_at": "2026-12-01T10:00:00+00:00",
        "finished_at": "2026-12-01T11:00:00+00:00",
        "steps": [
            {"id": "a", "title": "A", "started_at": "2026-12-01T10:00:00+00:00",
             "passed_at": "2026-12-01T10:30:00+00:00", "attempts": 3, "hints_opened": True, "run_id": 11,
             "files": [{"path": "x.py", "size": 3, "sha256": "ba7816bf" * 8}]},
            {"id": "b", "title": "B", "started_at": "2026-12-01T10:30:00+00:00",
             "passed_at": "2026-12-01T11:00:00+00:00", "attempts": 1, "hints_opened": False, "run_id": 12,
             "files": []},
        ],
    }  # fmt: skip
    doc["signature"] = completion.sign(doc, completion.event_private_key(event, SECRET))
    return doc


def _key(event: Event, secret: str = SECRET) -> bytes:
    return base64.b64decode(completion.public_key(event, secret).public_key)


def test_an_intact_record_verifies_against_the_events_key() -> None:
    event = _event()
    verdict = completion.verify(_record(event), [_key(event)])
    assert verdict.ok and verdict.valid and verdict.trusted is True, verdict.problems
    assert "Ada finished lab getting-started (2 steps)" in verdict.summary


def test_without_a_key_the_signer_is_unknown() -> None:
    verdict = completion.verify(_record(_event()))
    assert verdict.valid and verdict.trusted is None and not verdict.ok


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["attendee"].update(name="Mallory"),
        lambda d: d["steps"][0].update(passed_at="2026-12-01T10:01:00+00:00"),
        lambda d: d["steps"][0].update(attempts=1),
        lambda d: d["steps"][0]["files"][0].update(sha256="0" * 64),
        lambda d: d["lab"].update(id="kv-offload"),
        lambda d: d.update(finished_at="2026-11-30T11:00:00+00:00"),
    ],
)
def test_a_record_changed_after_signing_fails(edit: Any) -> None:
    event = _event()
    doc = _record(event)
    edit(doc)
    verdict = completion.verify(doc, [_key(event)])
    assert not verdict.valid and not verdict.ok
    assert any("changed after it was signed" in p for p in verdict.problems)


def test_a_record_forged_with_another_key_fails() -> None:
    event = _event()
    doc = _record(event)
    doc["attendee"]["name"] = "Mallory"
    doc["signature"] = completion.sign(doc, Ed25519PrivateKey.generate())  # a valid signature, wrong signer
    verdict = completion.verify(doc, [_key(event)])
    assert verdict.valid and verdict.trusted is False and not verdict.ok
    assert any("not the key you gave" in p for p in verdict.problems)


def test_a_step_not_passed_fails_even_when_signed() -> None:
    event = _event()
    key = completion.event_private_key(event, SECRET)
    doc = _record(event)
    del doc["steps"][1]["passed_at"]
    doc["signature"] = completion.sign(doc, key)
    assert not completion.verify(doc, [_key(event)]).ok
    doc = _record(event)
    doc["steps"].pop()
    doc["signature"] = completion.sign(doc, key)
    verdict = completion.verify(doc, [_key(event)])
    assert not verdict.ok and any("2 steps but the record lists 1" in p for p in verdict.problems)


def test_keys_differ_per_event_and_server_and_are_stable() -> None:
    assert _key(_event(1)) == _key(_event(1))
    assert _key(_event(1)) != _key(_event(2))
    assert _key(_event(1)) != _key(_event(1), secret="another server")


@pytest.mark.parametrize(
    "doc",
    [None, [], {}, {"format": "labserver-progress"}, {"format": completion.FORMAT, "schema_version": 1}],
)
def test_garbage_is_not_valid_and_does_not_raise(doc: Any) -> None:
    assert not completion.verify(copy.deepcopy(doc)).valid


def test_a_bad_key_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="copy the whole key"):
        completion.parse_key("abc")
