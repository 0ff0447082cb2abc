"""Live event kinds: one enum (``labserver.live.Kind``), each documented with its payload in
docs/architecture.md, and the pages' JavaScript subscribes to known names only."""

from __future__ import annotations

import re

import pytest

from labserver.live import Kind, LiveHub
from labserver.routes.instructor.stream import GRID_EVENTS, PASS_THROUGH
from tests.conftest import REPO

JS = REPO / "web" / "static"


def kinds_section() -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    match = re.search(r"^## Live event kinds\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, "docs/architecture.md has no section '## Live event kinds'"
    return match.group(1)


def test_every_kind_has_its_payload_documented() -> None:
    rows = {
        m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z.]+)` \|([^\n]*)$", kinds_section(), re.M)
    }
    missing = [k.value for k in Kind if k.value not in rows]
    assert not missing, f"document these kinds in docs/architecture.md, 'Live event kinds': {missing}"
    unknown = sorted(set(rows) - {k.value for k in Kind})
    assert not unknown, f"docs/architecture.md documents kinds that do not exist: {unknown}"


def test_publish_refuses_a_kind_that_is_not_in_the_enum() -> None:
    hub = LiveHub()
    assert hub.publish("check.started", 1).kind is Kind.check_started
    with pytest.raises(ValueError):
        hub.publish("check.strated", 1)


def test_the_attendee_pages_subscribe_to_known_kinds_only() -> None:
    known = {k.value for k in Kind} | {"ready"}
    source = (JS / "js" / "live.js").read_text()
    listed = re.search(r"const KINDS = \[(.*?)\];", source, re.S)
    assert listed, "web/static/js/live.js lists the kinds it subscribes to in `const KINDS = [...]`"
    kinds = set(re.findall(r"'([^']+)'", listed.group(1)))
    assert "check.finished" in kinds
    assert kinds <= known, f"live.js subscribes to unknown kinds: {sorted(kinds - known)}"
    used = set()
    for path in sorted((JS / "js").glob("*.js")):
        used |= set(re.findall(r"""['"`]live:([a-z.]+)['"`]""", path.read_text()))
        for loop in re.findall(r"for \(const kind of \[(.*?)\]\)", path.read_text()):
            used |= set(re.findall(r"'([^']+)'", loop))
    assert used <= kinds | {"ready"}, (
        f"pages listen to kinds live.js does not subscribe to: {sorted(used - kinds)}"
    )


def test_the_instructor_page_listens_to_known_stream_events_only() -> None:
    known = {"ready", *GRID_EVENTS, *(str(k) for k in PASS_THROUGH)}
    source = (JS / "instructor.js").read_text()
    names = set(re.findall(r"\bes\.addEventListener\('([a-z.]+)'", source))  # es: the EventSource
    names |= {
        n
        for group in re.findall(r"\[([^\]]*)\]\.forEach\(\(kind\)", source)
        for n in re.findall(r"'([^']+)'", group)
    }
    assert {"cell", "env", "ready"} <= names  # the patterns above still find the listeners
    assert names <= known, f"instructor.js listens to unknown stream events: {sorted(names - known)}"
