"""The rehearsal's server: ``labserver.app.create_app`` unchanged, with a backend that gives the
first ``REHEARSAL_LOCAL`` attendees real local environments and the rest of the crowd light ones.

``CrowdBackend`` is a subclass of the real :class:`~labserver.backends.local.LocalBackend` (name
``local+light``): every environment is a workspace folder seeded from the lab's ``starter/``, every
shell is a real ``bash`` on a PTY, every check a real ``python -I <the lab's checker>`` process whose
verdict comes through ``LAB_RESULT_FD``. What a *light* environment skips is the sandbox: its shell
and checks run without bubblewrap (``env -C <folder> ...`` instead), so the crowd beyond what this
2-core machine holds costs a process per check, not a namespace setup. The figures printed by
``rehearsal.py`` say how many environments were of each kind.

Started by ``rehearsal.py`` as ``uvicorn --factory crowd_backend:create_crowd_app`` (the default
event is opened as ``labserver serve`` does)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.local import EnvRecord, LocalBackend
from labserver.config import Settings
from labserver.services.events import ensure_default_event

ENV_ID = re.compile(r"ev\d+-at(\d+)$")


class CrowdBackend(LocalBackend):
    """Local environments for attendees ``1..local``, light ones (no sandbox) for the others."""

    name = "local+light"

    def __init__(self, settings: Settings, *, local: int) -> None:
        super().__init__(settings)
        self.local = local

    def is_light(self, ws: Path) -> bool:
        m = ENV_ID.search(ws.name)
        return bool(m) and int(m.group(1)) > self.local  # type: ignore[union-attr]

    def _command(
        self,
        argv: Sequence[str],
        ws: Path,
        state: EnvRecord,
        prefix: list[str],
        *,
        chdir: Path,
        readonly: Sequence[Path] = (),
        ws_writable: bool = True,
        new_session: bool = True,
    ) -> list[str]:
        if not self.is_light(ws):
            return super()._command(
                argv,
                ws,
                state,
                prefix,
                chdir=chdir,
                readonly=readonly,
                ws_writable=ws_writable,
                new_session=new_session,
            )
        return [*prefix, "env", "-C", str(chdir), *argv]


def create_crowd_app() -> FastAPI:
    settings = Settings()
    app = create_app(settings)
    ctx = app.state.ctx
    ctx.backend = CrowdBackend(settings, local=int(os.environ.get("REHEARSAL_LOCAL", "40")))
    with Session(ctx.engine) as session:
        ensure_default_event(
            session,
            title="Load rehearsal",
            labs=list(ctx.catalog.labs),
            code=settings.default_event_code,
        )
    return app
