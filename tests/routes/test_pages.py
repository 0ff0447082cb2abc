"""Attendee pages without a browser: page context functions, redirects, language, translations.
The browser flow itself is in tests/e2e (its own pytest run)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_keywords, parse_mapping_cfg
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session
from starlette.requests import Request

from labserver.config import Settings
from labserver.i18n import translations
from labserver.models import CheckRun, CheckStatus, Event
from labserver.routes import pages
from labserver.routes.deps import Me, resolve_attendee
from labserver.services.joining.events import create_event
from tests.conftest import EVENT_CODE, INSTRUCTOR_TOKEN, REPO, settle

TEMPLATES = REPO / "web" / "templates"
ATTENDEE_TEMPLATES = sorted(p for p in TEMPLATES.glob("*.html") if "instructor" not in p.name)


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """getting-started plus a lab whose lab.yaml is broken."""
    labs = tmp_path / "labs"
    labs.mkdir()
    shutil.copytree(
        REPO / "labs" / "getting-started",
        labs / "getting-started",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (labs / "broken-lab").mkdir()
    (labs / "broken-lab" / "lab.yaml").write_text(
        "id: broken-lab\ntitle: x\nsummary: y\nduration_min: 5\nstepz: []\n"
    )
    return Settings(
        data_dir=tmp_path / "data",
        labs_dir=labs,
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
    )


@pytest.fixture
def event(app: FastAPI) -> Event:
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        return create_event(
            session, title="Test event", labs=["getting-started", "broken-lab"], code=EVENT_CODE
        )


def join_cookie(client: TestClient, name: str = "Ada") -> str:
    resp = client.post("/api/v1/join", json={"event_code": EVENT_CODE, "name": name})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["token"])


def make_request(
    path: str, query: str = "", cookies: dict[str, str] | None = None, accept_language: str = ""
) -> Request:
    headers = []
    if cookies:
        headers.append((b"cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()).encode()))
    if accept_language:
        headers.append((b"accept-language", accept_language.encode()))
    return Request(
        {
            "type": "http",
            "method": "GET",
            "path": path,
            "query_string": query.encode(),
            "headers": headers,
            "scheme": "http",
            "server": ("test", 80),
            "root_path": "",
        }
    )


def me_for(app: FastAPI, session: Session, token: str) -> Me:
    me = resolve_attendee(session, token)
    assert me is not None
    return me


def add_run(app: FastAPI, me: Me, step: str, status: CheckStatus, message: str = "") -> None:
    with Session(app.state.ctx.engine) as session:
        session.add(
            CheckRun(
                event_id=me.event.id or 0,
                attendee_id=me.id,
                lab_id="getting-started",
                step_id=step,
                status=status,
                message=message,
            )
        )
        session.commit()


# -- redirects and access ----------------------------------------------------------------------
def test_pages_without_the_attendee_cookie_send_to_the_join_page(client: TestClient, event: Event) -> None:
    for path in ("/labs", "/labs/getting-started?step=write-file"):
        resp = client.get(path, follow_redirects=False)
        assert resp.status_code == 303
        assert resp.headers["location"].startswith("/join?next=")
        assert "getting-started" in resp.headers["location"] or path == "/labs"
    assert client.get("/", follow_redirects=False).headers["location"] == "/join"


def test_join_page_renders_the_form_and_next(client: TestClient, event: Event) -> None:
    resp = client.get("/join?next=/labs/getting-started")
    assert resp.status_code == 200
    assert 'id="join-form"' in resp.text and 'data-next="/labs/getting-started"' in resp.text
    assert client.get("/join?next=//evil.example/x").text.count('data-next="/labs"') == 1


def test_after_joining_the_root_goes_to_the_lab_list(client: TestClient, event: Event) -> None:
    join_cookie(client)
    assert client.get("/", follow_redirects=False).headers["location"] == "/labs"
    assert client.get("/join").text.count("You have already joined as Ada") == 1


# -- lab list ----------------------------------------------------------------------------------
def test_lab_list_context_has_progress_and_the_broken_lab_with_its_reason(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    token = join_cookie(client)
    with Session(app.state.ctx.engine) as session:
        me = me_for(app, session, token)
        add_run(app, me, "write-file", CheckStatus.failed)
        add_run(app, me, "write-file", CheckStatus.passed)
        ctx = pages.labs_context(make_request("/labs"), app.state.ctx, session, me)
    (lab,) = ctx["labs"]
    assert (lab["id"], lab["passed"], lab["total"], lab["done"]) == ("getting-started", 1, 5, False)
    (broken,) = ctx["unavailable"]
    assert broken["id"] == "broken-lab" and any("stepz" in p for p in broken["problems"])
    html = client.get("/labs").text
    assert "1/5 passed" in html
    assert 'class="lab-card unavailable" data-lab="broken-lab"' in html and "stepz" in html


def test_a_broken_lab_page_says_unavailable_instead_of_crashing(client: TestClient, event: Event) -> None:
    join_cookie(client)
    resp = client.get("/labs/broken-lab")
    assert resp.status_code == 503
    assert "This lab is unavailable" in resp.text and "stepz" in resp.text
    assert client.get("/labs/no-such-lab").status_code == 404


# -- lab page ----------------------------------------------------------------------------------
def test_lab_context_opens_the_first_step_not_passed_and_honours_step(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    token = join_cookie(client)
    with Session(app.state.ctx.engine) as session:
        me = me_for(app, session, token)
        ctx = pages.lab_context(
            make_request("/labs/getting-started"),
            app.state.ctx,
            session,
            me,
            app.state.ctx.catalog.labs["getting-started"],
        )
        assert ctx["current"] == "find-device"
        add_run(app, me, "find-device", CheckStatus.passed)
        add_run(app, me, "run-script", CheckStatus.failed, "warmup.log is missing")
        ctx = pages.lab_context(
            make_request("/labs/getting-started"),
            app.state.ctx,
            session,
            me,
            app.state.ctx.catalog.labs["getting-started"],
        )
        assert ctx["current"] == "run-script"
        assert ctx["passed"] == 1 and ctx["total"] == 5
        steps = {s["id"]: s for s in ctx["steps"]}
        assert steps["find-device"]["status"] == "passed"
        assert steps["run-script"]["status"] == "failing"
        assert steps["run-script"]["last_message"] == "warmup.log is missing"
        assert ctx["config"]["lab"] == "getting-started"
        asked = pages.lab_context(
            make_request("/labs/getting-started", "step=implement-rmsnorm"),
            app.state.ctx,
            session,
            me,
            app.state.ctx.catalog.labs["getting-started"],
        )
        assert asked["current"] == "implement-rmsnorm"


def test_lab_page_renders_steps_run_buttons_terminal_editor_and_config(
    client: TestClient, event: Event
) -> None:
    join_cookie(client)
    html = client.get("/labs/getting-started?step=write-file").text
    assert html.count('<article class="step"') == 5
    assert re.search(r'<article class="step" id="step-write-file"[^>]*data-status="not-started"[^>]*>', html)
    assert 'class="run-in-terminal" data-command="mkdir -p notes' in html
    for needle in (
        'id="terminal"',
        'id="file-tree"',
        'id="save-file"',
        'id="check-button"',
        'id="help-button"',
        'id="reset-dialog"',
        'href="/api/v1/labs/getting-started/download"',
    ):
        assert needle in html
    config = json.loads(
        re.search(r'<script id="lab-config" type="application/json">(.*?)</script>', html, re.S)[1]
    )
    assert config["step"] == "write-file" and [s["id"] for s in config["steps"]][2] == "write-file"


def test_paced_steps_are_locked_and_their_instructions_hidden(
    app: FastAPI, client: TestClient, event: Event
) -> None:
    with Session(app.state.ctx.engine) as session:
        row = session.get(Event, event.id)
        assert row is not None
        row.pace = {"getting-started": 2}
        session.add(row)
        session.commit()
    join_cookie(client)
    html = client.get("/labs/getting-started?step=write-file").text
    article = re.search(r'<article class="step" id="step-write-file".*?</article>', html, re.S)[0]
    assert 'data-locked="true"' in article
    assert "not open yet" in article and "run-in-terminal" not in article


# -- languages ---------------------------------------------------------------------------------
def test_every_page_has_the_language_switch(client: TestClient, event: Event) -> None:
    pages_html = [client.get("/join").text]
    join_cookie(client)
    pages_html += [client.get(p).text for p in ("/labs", "/labs/getting-started", "/labs/no-such-lab")]
    for html in pages_html:
        assert 'class="lang-switch"' in html
        assert 'href="/lang/zh?next=' in html or 'lang="zh" aria-current' in html


def test_language_switch_sets_the_cookie_and_the_pages_speak_chinese(
    client: TestClient, event: Event
) -> None:
    join_cookie(client)
    resp = client.get("/lang/zh?next=/labs/getting-started", follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == "/labs/getting-started"
    assert "labserver_lang=zh" in resp.headers["set-cookie"]
    client.cookies.set("labserver_lang", "zh")
    html = client.get("/labs/getting-started").text
    assert '<html lang="zh-CN">' in html
    assert ">检查</button>" in html and "入门：熟悉你的实验环境" in html and "在终端运行" in html
    assert "找到你的设备" in html  # step title from lab.yaml's zh
    assert "已通过 0/5" in client.get("/labs").text
    assert client.get("/lang/zh?next=//evil.example", follow_redirects=False).headers["location"] == "/"


def test_chinese_from_the_browser_preference(client: TestClient, event: Event) -> None:
    html = client.get("/join", headers={"Accept-Language": "zh-CN,zh;q=0.9"}).text
    assert "加入工作坊" in html and "活动码" in html


def test_language_switch_links_drop_a_lang_query(event: Event) -> None:
    ctx = pages.base_context(make_request("/labs/x", "lang=zh&step=a"), None, "lab")
    assert ctx["lang"] == "zh"
    en = next(link for link in ctx["langs"] if link["code"] == "en")
    assert en["href"] == "/lang/en?next=/labs/x%3Fstep%3Da"


def test_ui_strings_for_the_scripts_are_json_in_both_languages(client: TestClient, event: Event) -> None:
    for lang in ("en", "zh"):
        html = client.get(f"/join?lang={lang}").text
        raw = re.search(r'<script id="ui-strings" type="application/json">(.*?)</script>', html, re.S)[1]
        strings = json.loads(raw)
        assert "%(name)s" in strings["help_claimed_by"] and "%(path)s" in strings["reset_done"]
        assert strings["check"] == ("检查" if lang == "zh" else "Check")


#: the keywords of `make messages` (see babel.cfg)
KEYWORDS = ["gettext:2,2t", "gettext:1,1t", "_", "N_", "JoinError"]


def attendee_msgids() -> set[str]:
    """Every string `make messages` extracts for the attendee catalog (through babel.cfg)."""
    with (REPO / "babel.cfg").open() as f:
        method_map, options_map = parse_mapping_cfg(f)
    found = extract_from_dir(str(REPO), method_map, options_map, keywords=parse_keywords(KEYWORDS))
    return {message if isinstance(message, str) else message[0] for _f, _l, message, _c, _x in found}


def test_every_attendee_string_has_a_chinese_translation() -> None:
    zh = translations("zh")
    ids = attendee_msgids()
    assert {"Check", "Run in terminal", "Step %(n)s of %(total)s", "Please enter your name."} <= ids
    missing = sorted(m for m in ids if zh.gettext(m) == m)
    assert not missing, (
        f"run `make messages` and translate in labserver/locale/zh/LC_MESSAGES/messages.po: {missing}"
    )


def test_no_page_loads_anything_from_another_host() -> None:
    files = [
        *ATTENDEE_TEMPLATES,
        *(REPO / "web" / "static").rglob("*.js"),
        *(REPO / "web" / "static").rglob("*.css"),
    ]
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text), path
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", text), path
        assert "@import" not in text, path


def test_a_failed_environment_is_said_on_the_lab_page(app: FastAPI, client: TestClient, event: Event) -> None:
    from labserver.models import Environment

    token = join_cookie(client)
    settle(app)  # joining began the start: let it finish, then store a failure in its place
    with Session(app.state.ctx.engine) as session:
        me = me_for(app, session, token)
        session.merge(
            Environment(
                id=f"ev{event.id}-at{me.id}",
                event_id=event.id or 0,
                attendee_id=me.id,
                backend="local",
                state="failed",
                message="No node has room for you right now.",
            )
        )
        session.commit()
    html = client.get("/labs/getting-started").text
    assert 'class="env-failed"' in html and "No node has room for you right now." in html


def test_the_save_conflict_message_speaks_chinese(client: TestClient, event: Event) -> None:
    join_cookie(client)
    client.cookies.set("labserver_lang", "zh")
    url = "/api/v1/labs/getting-started/files/notes/a.txt"
    assert client.put(url, content=b"one").status_code == 200
    resp = client.put(url, content=b"two", headers={"If-Match": '"not-the-etag"'})
    assert resp.status_code == 409
    assert "被修改过" in resp.json()["detail"]


def test_event_lab_list_offers_progress_import_and_raise_hand(client, event) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import join as join_api

    headers = join_api(client, "Imp")
    page = client.get("/labs", headers=headers).text
    assert 'id="import-progress"' in page and 'id="export-progress"' not in page
    assert 'id="help-button"' in client.get("/labs/getting-started", headers=headers).text


def test_selfpaced_lab_list_offers_export_and_no_raise_hand(client, event) -> None:  # type: ignore[no-untyped-def]
    from sqlmodel import Session

    from labserver.models import Event
    from tests.conftest import join as join_api

    with Session(client.app.state.ctx.engine) as s:
        row = s.get(Event, event.id)
        assert row is not None
        row.selfpaced = True
        s.add(row)
        s.commit()
    headers = join_api(client, "Solo")
    page = client.get("/labs", headers=headers).text
    assert 'id="export-progress"' in page and 'id="import-progress"' not in page
    assert 'id="help-button"' not in client.get("/labs/getting-started", headers=headers).text
