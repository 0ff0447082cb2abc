"""`labserver report EVENT` writes the instructor's report offline (the same JSON as the download, a
self-contained HTML); `labserver verify FILE` checks a completion record offline (exit 0 valid, 1
changed or forged, 3 intact but no --key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from labserver.cli.main import app as cli
from labserver.config import Settings
from labserver.models import Event
from labserver.services.reporting import completion
from tests.conftest import instructor_headers, join
from tests.routes.test_completion import STEPS, _me, _pass


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABSERVER_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("LABSERVER_LABS_DIR", str(settings.labs_dir))
    monkeypatch.setenv("LABSERVER_WEB_DIR", str(settings.web_dir))
    monkeypatch.setenv("LABSERVER_DATABASE_URL", settings.database_url)


def test_report_command_writes_the_downloads(
    app: FastAPI, event: Event, cli_env: None, tmp_path: Path
) -> None:
    with TestClient(app) as client:
        ada = join(client, "Ada")
        _pass(app, event, _me(client, ada), STEPS[:2])
        online = client.get(f"/api/v1/events/{event.id}/report.json", headers=instructor_headers()).json()
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["report", event.code, "--out", str(out)])
    assert result.exit_code == 0, result.output
    offline = json.loads((out / "report.json").read_text())
    online.pop("generated_at"), offline.pop("generated_at")
    assert offline == online
    assert offline["labs"][0]["steps"][1]["passed"] == 1
    html = (out / "report.html").read_text()
    assert "<script src=" not in html and "<link" not in html  # self-contained
    assert "Chart" in html and 'id="report-data"' in html
    missing = CliRunner().invoke(cli, ["report", "NOPE", "--out", str(out)])
    assert missing.exit_code == 1 and "no event 'NOPE'" in missing.output


def test_verify_command_exit_codes(app: FastAPI, event: Event, cli_env: None, tmp_path: Path) -> None:
    with TestClient(app) as client:
        ada = join(client, "Ada")
        _pass(app, event, _me(client, ada), STEPS)
        doc = client.get("/api/v1/labs/getting-started/completion", headers=ada).json()
        key = client.get("/api/v1/completion-key", headers=ada).json()["public_key"]
    record = tmp_path / "record.json"

    def run(d: object, *args: str) -> tuple[int, str]:
        record.write_text(json.dumps(d))
        r = CliRunner().invoke(cli, ["verify", str(record), *args])
        return r.exit_code, r.output

    code, out = run(doc, "--key", key)
    assert code == 0 and out.startswith("VALID: Ada finished lab getting-started"), out
    assert run(doc)[0] == 3  # intact, but who signed it is not known without the key
    altered = json.loads(json.dumps(doc))
    altered["steps"][2]["attempts"] = 7
    code, out = run(altered, "--key", key)
    assert code == 1 and "changed after it was signed" in out
    forged = json.loads(json.dumps(doc))
    forged["attendee"]["name"] = "Mallory"
    forged["signature"] = completion.sign(forged, Ed25519PrivateKey.generate())
    code, out = run(forged, "--key", key)
    assert code == 1 and "not the key you gave" in out
    assert CliRunner().invoke(cli, ["verify", str(record), "--key", "nope"]).exit_code == 2  # bad parameter
    record.write_text("{not json")
    assert CliRunner().invoke(cli, ["verify", str(record), "--key", key]).exit_code == 1
