"""Fixtures for self-paced tests: a self-paced app in a temp data folder, clients that act as its
learner, and a helper that passes the quick `write-file` step of the getting-started lab."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.config import Settings
from labserver.selfpaced.learner import selfpaced_settings
from labserver.selfpaced.server import create_selfpaced_app

REPO = Path(__file__).resolve().parents[2]
HELLO = "Hello, Ascend!\n你好，昇腾！\n".encode()


def make_settings(data_dir: Path) -> Settings:
    return selfpaced_settings(data_dir).model_copy(
        update={"labs_dir": REPO / "labs", "web_dir": REPO / "web"}
    )


@pytest.fixture
def sp_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "selfpaced")


@pytest.fixture
def sp_app(sp_settings: Settings) -> FastAPI:
    return create_selfpaced_app(sp_settings, name="Ada Lovelace")


@pytest.fixture
def sp_client(sp_app: FastAPI) -> Iterator[TestClient]:
    with TestClient(sp_app, headers={"Authorization": f"Bearer {sp_app.state.learner.token}"}) as c:
        yield c


def pass_write_file(client: TestClient, headers: dict[str, str] | None = None) -> dict:
    """Save notes/hello.txt through the API and press Check on `write-file`; returns the run."""
    put = client.put("/api/v1/labs/getting-started/files/notes/hello.txt", content=HELLO, headers=headers)
    assert put.status_code == 200, put.text
    run = client.post("/api/v1/labs/getting-started/steps/write-file/check", headers=headers)
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "passed", run.json()
    return run.json()


def fail_find_device(client: TestClient, headers: dict[str, str] | None = None) -> dict:
    run = client.post("/api/v1/labs/getting-started/steps/find-device/check", headers=headers)
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "failed", run.json()
    return run.json()
