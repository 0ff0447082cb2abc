"""The rehearsal's server: ``labserver.app.create_app`` unchanged, with a backend that gives the
first ``REHEARSAL_DOCKER`` attendees Docker environments, the next ``REHEARSAL_LOCAL`` real local
environments and the rest of the crowd light ones.

``RoomBackend`` (name ``docker+local+light``) sends each environment to one of two real backends:
the product's :class:`~labserver.backends.docker.backend.DockerBackend` (containers, a grader
container per check, as ``LABSERVER_BACKEND=docker`` runs them) for attendees ``1..docker``, and
``CrowdBackend`` for the others. A reference goes back to the backend that made it (its
``backend`` field).

``CrowdBackend`` is a subclass of the real :class:`~labserver.backends.local.LocalBackend` (name
``local+light``): every environment is a workspace folder seeded from the lab's ``starter/``, every
shell is a real ``bash`` on a PTY, every check a real ``python -I <the lab's checker>`` process whose
verdict comes through ``LAB_RESULT_FD``. What a *light* environment skips is the sandbox: its shell
and checks run without bubblewrap (``env -C <folder> ...`` instead), so the crowd beyond what this
2-core machine holds costs a process per check, not a namespace setup. The figures printed by
``rehearsal.py`` say how many environments were of each kind.

With ``REHEARSAL_DOCKER=0`` the server's backend is ``CrowdBackend`` alone. Started by ``rehearsal.py`` as ``uvicorn --factory crowd_backend:create_crowd_app`` (the default
event is opened as ``labserver serve`` does)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
from fastapi import FastAPI
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.base import (
    CheckRaw,
    CheckRequest,
    EnvRef,
    EnvSpec,
    EnvStatus,
    ExecResult,
    FileEntry,
    LabSeed,
    ProgressCallback,
    Terminal,
)
from labserver.backends.docker.backend import DockerBackend
from labserver.backends.docker.scheduler import Running, Usage, has_room
from labserver.backends.local import EnvRecord, LocalBackend
from labserver.config import Settings
from labserver.content.loader import LabCatalog
from labserver.services.joining.events import ensure_default_event
from labserver.services.provisioning import env_spec

ENV_ID = re.compile(r"ev\d+-at(\d+)$")


def attendee_number(env_id: str) -> int:
    """The attendee id in an environment id (``ev1-at7`` -> 7); 0 when there is none."""
    m = ENV_ID.search(env_id)
    return int(m.group(1)) if m else 0


def kind_of(attendee_id: int, *, docker: int, local: int) -> str:
    """The environment attendee ``attendee_id`` gets (ids count from 1): ``docker`` for the first
    ``docker``, ``local`` for the next ``local``, ``light`` for the rest."""
    if attendee_id <= docker:
        return "docker"
    return "local" if attendee_id <= docker + local else "light"


class CrowdBackend(LocalBackend):
    """Local environments for attendees ``1..local``, light ones (no sandbox) for the others."""

    name = "local+light"

    def __init__(self, settings: Settings, *, local: int, docker: int = 0) -> None:
        super().__init__(settings)
        self.local = local
        self.docker = docker  # attendees 1..docker are another backend's: local here too, if asked

    def is_light(self, ws: Path) -> bool:
        return kind_of(attendee_number(ws.name), docker=self.docker, local=self.local) == "light"

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


class RoomBackend:
    """Docker environments for attendees ``1..docker``, ``CrowdBackend`` ones for the others."""

    name = "docker+local+light"

    def __init__(self, settings: Settings, *, docker: int, local: int) -> None:
        self.docker_count = docker
        self.docker = DockerBackend(settings)
        self.crowd = CrowdBackend(settings, local=local, docker=docker)

    def _of(self, ref: EnvRef) -> Any:
        return self.docker if ref.backend == self.docker.name else self.crowd

    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        kind = kind_of(attendee_number(spec.env_id), docker=self.docker_count, local=self.crowd.local)
        if kind == "docker":
            return await self.docker.create(spec, progress)
        return await self.crowd.create(spec, progress)

    async def status(self, ref: EnvRef) -> EnvStatus:
        return await self._of(ref).status(ref)  # type: ignore[no-any-return]

    async def exec(
        self,
        ref: EnvRef,
        argv: Sequence[str],
        *,
        timeout: float = 60.0,
        readonly: bool = False,
        cwd: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        return await self._of(ref).exec(  # type: ignore[no-any-return]
            ref, argv, timeout=timeout, readonly=readonly, cwd=cwd, env=env
        )

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        return await self._of(ref).run_check(ref, request)  # type: ignore[no-any-return]

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> Terminal:
        return await self._of(ref).terminal(ref, cols, rows, cwd=cwd)  # type: ignore[no-any-return]

    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]:
        return await self._of(ref).list_files(ref, path)  # type: ignore[no-any-return]

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        return await self._of(ref).read_file(ref, path)  # type: ignore[no-any-return]

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        await self._of(ref).write_file(ref, path, data)

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        return await self._of(ref).reset_lab(ref, lab, backup_name)  # type: ignore[no-any-return]

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        return await self._of(ref).archive(ref, path)  # type: ignore[no-any-return]

    async def destroy(self, ref: EnvRef) -> None:
        await self._of(ref).destroy(ref)

    async def discover(self) -> list[EnvRef]:
        return [*await self.docker.discover(), *await self.crowd.discover()]

    def engine_stats(self) -> dict[str, Any]:
        return self.docker.engine_stats()

    async def aclose(self) -> None:
        await self.docker.aclose()


async def docker_capacity(settings: Settings) -> tuple[int, str]:
    """How many environments of the default event (every lab) the Docker backend places on this
    server's engines before it answers ``no-room``, counted with the scheduler's own rule
    (:func:`~labserver.backends.docker.scheduler.has_room`), and how that was reckoned."""
    labs = list(LabCatalog(settings.labs_dir).labs.values())
    limits = env_spec.limits_for(labs, settings.docker)
    backend = DockerBackend(settings)
    try:
        nodes = await backend.engines.nodes()
    finally:
        await backend.aclose()
    usage = Usage()
    for node in nodes:
        while has_room(node, usage, limits.cpus, limits.memory_mb):
            usage.envs.append(Running(f"probe{len(usage.envs)}", node.name, limits.cpus, limits.memory_mb))
    how = "; ".join(
        f"{n.name}: {n.cpus:g} CPUs x {n.cpu_overcommit:g} and {n.memory_mb} MiB x {n.memory_overcommit:g}"
        for n in nodes
    )
    return len(usage.envs), f"{how}, for environments of {limits.cpus:g} CPUs and {limits.memory_mb} MiB"


def docker_shortfall(settings: Settings, want: int) -> str:
    """Why ``want`` Docker environments of the default event cannot be had on this machine's
    engine ("" when they can): no engine, no image, or more than the scheduler places (beyond it the
    scheduler answers no-room, and those starts would wait for room, holding the start slots, for
    the whole run, as on a full Docker-only server)."""
    image = settings.docker.image
    try:
        docker.from_env(timeout=10).images.get(image)
    except docker.errors.ImageNotFound:
        return f"the image {image} is missing; build it (labserver images build)"
    except docker.errors.DockerException as exc:
        return f"no Docker engine answers ({exc}); start dockerd (as .ci/run does)"
    room, how = asyncio.run(docker_capacity(settings))
    if want > room:
        return f"this machine's Docker engine holds {room} environments of the event ({how}); ask for {room} or fewer"
    return ""


async def remove_docker_environments(settings: Settings) -> int:
    """Destroy every container and volume of this server's Docker name prefix (after a rehearsal);
    returns how many environments there were."""
    backend = DockerBackend(settings)
    try:
        refs = await backend.discover()
        for ref in refs:
            await backend.destroy(ref)
        for grader in await backend.stale_graders(older_than_s=0):
            await backend.remove_container(grader)
        return len(refs)
    finally:
        await backend.aclose()


def create_crowd_app() -> FastAPI:
    settings = Settings()
    app = create_app(settings)
    ctx = app.state.ctx
    local = int(os.environ.get("REHEARSAL_LOCAL", "40"))
    docker = int(os.environ.get("REHEARSAL_DOCKER", "0"))
    ctx.backend = (
        RoomBackend(settings, docker=docker, local=local) if docker else CrowdBackend(settings, local=local)
    )
    with Session(ctx.engine) as session:
        ensure_default_event(
            session,
            title="Load rehearsal",
            labs=list(ctx.catalog.labs),
            code=settings.default_event_code,
        )
    return app
