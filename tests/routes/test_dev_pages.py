"""The pages of ``serve --dev`` (issue 34): a lab that does not load lists every problem on its own
page, in the attendee's language, with the script that reloads it at the next save; the lab page
tells its script it may refresh the text in place. A room's server (no --dev) is unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from labserver.app import create_app
from labserver.config import Settings
from labserver.content.scaffold import new_lab
from labserver.services.joining.events import create_event
from tests.conftest import EVENT_CODE, INSTRUCTOR_TOKEN, REPO, join


def client_for(tmp_path: Path, database_url: str, dev: bool) -> TestClient:
    labs = tmp_path / "labs"
    new_lab(labs / "good-lab")
    new_lab(labs / "bad-lab")
    spec = (labs / "bad-lab" / "lab.yaml").read_text()
    (labs / "bad-lab" / "lab.yaml").write_text(spec.replace("timeout_s: 60", "timeout_s: -1"))
    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=labs,
        web_dir=REPO / "web",
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
    )
    app = create_app(settings, dev_labs=[labs / "good-lab", labs / "bad-lab"] if dev else ())
    with Session(app.state.ctx.engine) as session:
        create_event(session, title="t", labs=["good-lab", "bad-lab"], code=EVENT_CODE)
    return TestClient(app)


def test_a_broken_lab_lists_its_problems_and_reloads_in_dev_mode(tmp_path: Path, database_url: str) -> None:
    with client_for(tmp_path, database_url, dev=True) as client:
        headers = join(client)
        page = client.get("/labs/bad-lab", headers=headers)
        assert page.status_code == 503
        assert 'id="lab-problems"' in page.text and "timeout_s" in page.text
        assert "Input should be greater than 0" in page.text
        assert "/static/js/dev_reload.js" in page.text
        zh = client.get("/labs/bad-lab", headers={**headers, "Accept-Language": "zh-CN"})
        assert "修正下面的问题并保存" in zh.text
        good = client.get("/labs/good-lab", headers=headers)
        config = json.loads(
            re.search(r'<script id="lab-config" type="application/json">(.*?)</script>', good.text).group(1)
        )  # type: ignore[union-attr]
        assert config["dev"] is True


def test_a_rooms_server_keeps_its_short_message(tmp_path: Path, database_url: str) -> None:
    with client_for(tmp_path, database_url, dev=False) as client:
        headers = join(client)
        page = client.get("/labs/bad-lab", headers=headers)
        assert page.status_code == 503 and "tell the instructor" in page.text
        assert "dev_reload.js" not in page.text and 'id="lab-problems"' not in page.text
        good = client.get("/labs/good-lab", headers=headers)
        assert '"dev": false' in good.text
