"""A full workspace is told to the attendee in their language (issue 13 item 10): the editor's
save answers 507 "Your workspace is full (N MB): delete files" instead of a 500. The disk cannot be
filled for real here without a file system of its own, so the backends below are the real local
backend whose writes fail the way a full disk makes them fail: ENOSPC from the OS (local backend,
no per-workspace limit), or WorkspaceFull with the volume's size (what the Docker backend raises on
a size-limited volume; the real thing: tests/backends/docker/test_disk_quota.py)."""

from __future__ import annotations

import dataclasses
import errno

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from labserver.backends.base import CheckRaw, CheckRequest, EnvRef, WorkspaceFull
from labserver.backends.local import LocalBackend
from labserver.models import Event
from tests.conftest import join

LAB = "/api/v1/labs/getting-started"


class EnospcLocalBackend(LocalBackend):
    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)


class QuotaFullLocalBackend(LocalBackend):
    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        raise WorkspaceFull(2048)


@pytest.mark.parametrize(
    ("backend", "lang", "expected"),
    [
        (EnospcLocalBackend, "en", "Your workspace is full: delete files"),
        (EnospcLocalBackend, "zh", "你的工作区已满：请删除一些文件"),
        (QuotaFullLocalBackend, "en", "Your workspace is full (2048 MB): delete files"),
        (QuotaFullLocalBackend, "zh", "你的工作区已满（2048 MB）"),
    ],
)
def test_a_save_into_a_full_workspace_says_so(
    app: FastAPI, event: Event, backend: type[LocalBackend], lang: str, expected: str
) -> None:
    app.state.ctx.backend = backend(app.state.ctx.settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        me = join(client, "Ada")
        resp = client.put(f"{LAB}/files/notes.txt?lang={lang}", content=b"hello", headers=me)
    assert resp.status_code == 507, resp.text
    assert expected in resp.json()["detail"] and resp.json()["reason"] == "disk-full"


class EnospcCheckLocalBackend(LocalBackend):
    """The real check runs; its log then shows what a full disk prints (a checker or the
    attendee's code that could not write its output)."""

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        raw = await super().run_check(ref, request)
        log = raw.log + b"\nOSError: [Errno 28] No space left on device: 'out.json'\n"
        return dataclasses.replace(raw, log=log, exit_code=1, result=b"")


@pytest.mark.parametrize(("lang", "expected"), [("en", "Your workspace is full"), ("zh", "你的工作区已满")])
def test_a_check_that_met_a_full_disk_says_the_workspace_is_full(
    app: FastAPI, event: Event, lang: str, expected: str
) -> None:
    app.state.ctx.backend = EnospcCheckLocalBackend(app.state.ctx.settings)
    with TestClient(app) as client:
        me = join(client, "Ada")
        run = client.post(f"{LAB}/steps/write-file/check?lang={lang}", headers=me).json()
    assert run["status"] != "passed" and expected in run["message"], run
