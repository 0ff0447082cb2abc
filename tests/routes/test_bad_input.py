"""Hostile input gets a clear 4xx, never a 500 (issue 13 item 8): ids past 2^63, names longer than
the file system allows, JSON nested 100k deep, numbers with thousands of digits; and a CSV export
never hands a spreadsheet a formula. The last test walks every route of the app with all of these."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from labserver.models import Event
from labserver.routes.deps import INSTRUCTOR_COOKIE, make_instructor_cookie
from labserver.services.dashboard import room
from tests.conftest import EVENT_CODE, instructor_headers, iter_routes, join

LAB = "/api/v1/labs/getting-started"
HUGE_IDS = ("9223372036854775808", "99999999999999999999999", "0", "-1")
LONG_NAME = "n" * 300
DEEP = b"[" * 100_000 + b"]" * 100_000
BIG_NUMBER = b'{"event_code": ' + b"9" * 5000 + b', "name": "x"}'


@pytest.fixture
def raw(app: FastAPI) -> Iterator[TestClient]:
    """A client that shows a 500 as a response (the default one raises the server's exception)."""
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("bad", HUGE_IDS)
def test_ids_out_of_range_are_a_clear_4xx(raw: TestClient, event: Event, bad: str) -> None:
    api = raw.get(f"/api/v1/events/{bad}/progress", headers=instructor_headers())
    assert api.status_code == 422, api.text
    assert "9223372036854775807" in api.text or "greater than or equal to 1" in api.text
    raw.cookies.set(INSTRUCTOR_COOKIE, make_instructor_cookie(raw.app.state.ctx, "Zoe"))  # type: ignore[attr-defined]
    page = raw.get(f"/instructor/events/{bad}")
    assert page.status_code == 422, page.text
    page = raw.get(f"/instructor/events/{event.id}/attendees/{bad}")
    assert page.status_code == 422, page.text


def test_a_file_name_longer_than_the_file_system_allows_is_a_clear_400(raw: TestClient, event: Event) -> None:
    me = join(raw, "Ada")
    for url in (f"{LAB}/files/{LONG_NAME}", f"{LAB}/files/d/{LONG_NAME}.py", f"{LAB}/files/" + "d/" * 2100):
        put = raw.put(url, content=b"x", headers=me)
        get = raw.get(url, headers=me)
        for resp in (put, get):
            assert resp.status_code == 400, (url[:80], resp.status_code, resp.text[:200])
            assert "too long" in resp.json()["detail"]
    assert (
        raw.put(f"{LAB}/files/{'n' * 255}", content=b"x", headers=me).status_code == 200
    )  # the limit itself


def test_a_progress_file_nested_100k_deep_is_a_clear_400(raw: TestClient, event: Event) -> None:
    me = join(raw, "Ada")
    deep = b'{"format": "labserver-progress", "schema_version": 1, "x": ' + DEEP + b"}"
    resp = raw.post("/api/v1/progress/import", content=deep, headers=me)
    assert resp.status_code == 400, resp.text[:300]
    assert resp.json()["code"] == "bad-progress-file" and "nested too deep" in resp.json()["detail"]
    digits = b'{"format": "labserver-progress", "schema_version": 1' + b"0" * 5000 + b"}"
    resp = raw.post("/api/v1/progress/import", content=digits, headers=me)
    assert resp.status_code == 400 and "digits" in resp.json()["detail"], resp.text[:300]


def test_a_json_body_with_a_5000_digit_number_or_deep_nesting_says_what_is_wrong(raw: TestClient) -> None:
    resp = raw.post("/api/v1/join", content=BIG_NUMBER, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "digits" in resp.json()["detail"], resp.text
    deep = b"[" * 50_000 + b"]" * 50_000
    resp = raw.post("/api/v1/join", content=deep, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "nested too deep" in resp.json()["detail"], resp.text


def test_the_csv_export_neutralises_formulas(raw: TestClient, event: Event) -> None:
    names = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "Ada"]
    for name in names:
        join(raw, name)
    text = raw.get(f"/api/v1/events/{event.id}/export.csv", headers=instructor_headers()).text
    cells = {r["attendee"] for r in csv.DictReader(io.StringIO(text))}
    assert cells == {"'" + n for n in names[:-1]} | {"Ada"}, cells
    # tab and CR are stripped from a joined name; any other cell that starts with them is prefixed
    assert [room.csv_cell(v) for v in ("\tx", "\rx", "x=1", 3, None)] == ["'\tx", "'\rx", "x=1", 3, ""]


# -- every route, every kind of bad input -------------------------------------------------------------
BAD_PARAMS = {
    "event_id": HUGE_IDS,
    "attendee_id": HUGE_IDS,
    "help_id": HUGE_IDS,
    "env_id": (LONG_NAME, "ev1-at1"),
    "lab_id": (LONG_NAME, "getting-started"),
    "step_id": (LONG_NAME, "write-file"),
    "path": (LONG_NAME, "d/" + LONG_NAME, "a/" * 2100),
}
#: a JSON body with every field name a route takes, each set to something hostile
FIELDS = ["title", "labs", "code", "capacity", "starts_at", "ends_at", "backend", "image", "status"]
FIELDS += ["lab", "unlocked", "message", "step", "event_code", "name", "note"]
HOSTILE_BODIES: list[tuple[str, bytes]] = [
    ("deep", DEEP),
    ("digits", b'{"capacity": ' + b"9" * 5000 + b"}"),
    ("big ints", json.dumps({f: 10**30 for f in FIELDS}).encode()),
    ("long strings", json.dumps({f: "x" * 5000 for f in FIELDS}).encode()),
    (
        "plausible",
        json.dumps(
            {
                "title": "t",
                "labs": ["getting-started"],
                "capacity": 10**19,
                "lab": "getting-started",
                "step": "write-file",
                "unlocked": 10**19,
                "status": "open",
                "message": "m",
                "event_code": EVENT_CODE,
                "name": "=cmd|' /C calc'!A0",
            }
        ).encode(),
    ),
]
HOSTILE_FORMS = [
    {"title": "t", "labs": "getting-started", "capacity": "9" * 30, "starts_at": "9" * 30, "status": "open"},
    {"title": "x" * 5000, "labs": "x" * 300, "code": "x" * 300, "capacity": "-" + "9" * 5000},
]


def urls(path: str, event_id: int) -> list[str]:
    names = re.findall(r"\{(\w+)(?::\w+)?\}", path)
    if not names:
        return [path]
    out = []
    for name in names:  # one parameter hostile at a time, the others plausible
        for bad in BAD_PARAMS.get(name, ("x",)):
            values = {n: (bad if n == name else _good(n, event_id)) for n in names}
            out.append(re.sub(r"\{(\w+)(?::\w+)?\}", lambda m, v=values: v[m.group(1)], path))
    return out


def _good(name: str, event_id: int) -> str:
    return {"event_id": str(event_id), "attendee_id": "1", "help_id": "1", "env_id": f"ev{event_id}-at1"}.get(
        name, BAD_PARAMS.get(name, ("x",))[-1]
    )


def test_no_route_answers_bad_input_with_a_5xx(app: FastAPI, raw: TestClient, event: Event) -> None:
    me = join(raw, "Ada")
    cookie = make_instructor_cookie(app.state.ctx, "Zoe")
    walked: set[tuple[str, str]] = set()
    failures = []
    for path, route in iter_routes(app):
        if not isinstance(route, APIRoute) or path.endswith("/stream"):
            continue
        instructor = "instructor" in (route.tags or []) or path.startswith("/instructor")
        who = instructor_headers() if instructor and path.startswith("/api") else {} if instructor else me
        good = _good_url(path, event.id or 0)
        for method in sorted(route.methods - {"HEAD", "OPTIONS"}):
            attempts: list[tuple[str, str, dict[str, object]]] = [
                (url, "no body", {}) for url in urls(path, event.id or 0)
            ]
            if method != "GET":
                attempts += [
                    (good, name, {"content": body, "headers": {"Content-Type": "application/json"}})
                    for name, body in HOSTILE_BODIES
                ]
                attempts += [(good, f"form {i}", {"data": form}) for i, form in enumerate(HOSTILE_FORMS)]
            for url, what, kwargs in attempts:
                raw.cookies.clear()
                if instructor and not who:
                    raw.cookies.set(INSTRUCTOR_COOKIE, cookie)
                extra = kwargs.pop("headers", {})
                headers = {**who, "Origin": "http://testserver", **extra}  # type: ignore[dict-item]
                resp = raw.request(method, url, headers=headers, follow_redirects=False, **kwargs)  # type: ignore[arg-type]
                if resp.status_code >= 500 and resp.status_code != 503:  # 503: the backend is busy
                    failures.append((method, url[:90], what, resp.status_code, resp.text[:120]))
            walked.add((method, path))
    assert not failures, "\n".join(map(str, failures[:30])) + f"\n({len(failures)} in all)"
    assert len(walked) >= 45, len(walked)


def _good_url(path: str, event_id: int) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: _good(m.group(1), event_id), path)


@pytest.mark.parametrize(
    ("lang", "expected"), [("en", "too big (at most 256 KB here)"), ("zh", "请求内容太大")]
)
def test_a_body_over_the_routes_limit_is_refused_in_the_attendees_language(
    raw: TestClient, event: Event, lang: str, expected: str
) -> None:
    me = join(raw, "Ada")
    resp = raw.post(f"/api/v1/help?lang={lang}", content=b"x" * 300_000, headers=me)
    assert resp.status_code == 413 and expected in resp.json()["detail"], resp.text
    assert raw.put(f"{LAB}/files/ok.txt", content=b"x" * 300_000, headers=me).status_code == 200  # 2 MB there
