"""The Docker backend: one hardened container per attendee, on one or more Docker engines.

- Names are deterministic (``labserver-<escaped env id>``, volume ``labserver-ws-<escaped env id>``)
  and every object carries ``labserver.*`` labels, so ``create`` is idempotent and ``discover``
  re-adopts containers after a restart. Which node and which Ascend card an environment holds is
  read back from its labels: the containers are the source of truth, not server memory.
- Configs come from the pure builders in :mod:`.config`; placement from :mod:`.scheduler`; clients,
  threads, usage and the one make / wait-ready / seed path from :mod:`.engines`, shared with the
  warm pool (:mod:`.warmpool`), which ``create`` asks first. What a reference carries is
  :class:`~.state.DockerState`.
- Checks run in a separate grader container (:mod:`.grader`); terminals are TTY execs
  (:mod:`.terminal`); files go through the API as the attendee's uid (:mod:`.files`).
- The Docker SDK is blocking: calls run in the engines' own thread pool so that slow execs never
  starve the event loop's default executor. An engine that does not answer gives ``EnvState.failed``
  from ``status`` and a ``ProvisionError(reason="engine-down")`` from ``create``, never a hang.

Capabilities beyond :class:`~labserver.backends.base.Backend`: ``Stoppable`` (:meth:`stop`),
``WarmPooled`` (:meth:`prepare_event`), ``Closable`` (:meth:`aclose`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import docker
import docker.errors

from labserver import clock
from labserver.backends.base import (
    MAX_ARCHIVE_BYTES,
    MAX_READ_BYTES,
    BackendError,
    CheckRaw,
    CheckRequest,
    EnvironmentGone,
    EnvRef,
    EnvSpec,
    EnvState,
    EnvStatus,
    ExecResult,
    FileEntry,
    LabSeed,
    PathRefused,
    ProgressCallback,
    ProvisionError,
    TooBig,
    WorkspaceFull,
    backoff,
    safe_relpath,
)
from labserver.backends.docker import config as dc
from labserver.backends.docker import disk, files, grader
from labserver.backends.docker.engines import ENGINE_ERRORS, Engines, nodes_from_settings
from labserver.backends.docker.scheduler import Node, Placement
from labserver.backends.docker.state import DockerState
from labserver.backends.docker.terminal import DockerTerminal, open_terminal
from labserver.backends.docker.warmpool import WarmPool
from labserver.config import Settings

__all__ = ["ENGINE_ERRORS", "DockerBackend", "nodes_from_settings"]

log = logging.getLogger(__name__)


class DockerBackend:
    name = "docker"

    def __init__(
        self, settings: Settings, *, nodes: list[Node] | None = None, prefix: str | None = None
    ) -> None:
        self.settings = settings
        self.cfg = settings.docker
        #: names are ``<prefix>-<env id>``; discover() adopts only this prefix's containers
        self.prefix = prefix or self.cfg.name_prefix or dc.DEFAULT_PREFIX
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", self.prefix):
            raise ValueError(f"docker name prefix {self.prefix!r}: use [a-z0-9.-]")
        self.engines = Engines(
            self.cfg, nodes if nodes is not None else nodes_from_settings(self.cfg), self.prefix
        )
        self.engines.disks_dir = settings.data_dir / "disks"
        if self.cfg.workspace_mb:
            for node in self.engines.configured:
                reason = disk.why_not(node.url, self.cfg.workspace_mb)
                if reason:
                    log.warning("workspaces on %s have no size limit: %s", node.name, reason)
        #: warm containers per event (:meth:`prepare_event` configures it; ``create`` claims first)
        self.warm_pool = WarmPool(self.engines)
        self._env_locks: dict[str, asyncio.Lock] = {}

    @property
    def workspace_mb(self) -> int:
        """The workspace size limit in MB when this server's volumes get one (disk.py), else 0."""
        if not self.cfg.workspace_mb or any(
            disk.why_not(n.url, self.cfg.workspace_mb) for n in self.engines.configured
        ):
            return 0
        return self.cfg.workspace_mb

    def _lock(self, env_id: str) -> asyncio.Lock:
        return self._env_locks.setdefault(env_id, asyncio.Lock())

    # -- references --------------------------------------------------------------------------
    def _ref(self, container: Any, node: str) -> EnvRef:
        lab = container.labels
        env_id = lab.get(dc.LABEL_ENV) or dc.env_id_from_name(container.name, self.prefix) or container.name
        if lab.get(dc.LABEL_ROLE) == "warm":
            env_id = dc.env_id_from_name(container.name, self.prefix) or env_id
        volume = next(
            (
                m["Name"]
                for m in container.attrs.get("Mounts", [])
                if m.get("Destination") == dc.WORKSPACE and m.get("Name")
            ),
            dc.volume_name(env_id, self.prefix),
        )
        state = DockerState.from_labels(lab, container=container.name, volume=volume)
        return EnvRef(
            env_id=env_id,
            backend=self.name,
            infra_id=container.id,
            node=node,
            device=lab.get("labserver.device", "cpu-emu"),
            data=state.to_data(),
        )

    def _state(self, ref: EnvRef) -> DockerState:
        return DockerState.of(ref, self.prefix)

    def _placement(self, ref: EnvRef) -> Placement:
        return Placement(self.engines.node(ref.node), self._state(ref).card)

    # -- lifecycle ---------------------------------------------------------------------------
    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        """See :meth:`labserver.backends.base.Backend.create`: reuse the container of
        ``spec.env_id``, else claim a warm one, else make one (:meth:`Engines.provision`)."""

        async def say(phase: str, message: str) -> None:
            if progress:
                await progress(phase, message)

        async with self._lock(spec.env_id):
            try:
                return await self._create(spec, say)
            except BackendError:
                raise
            except docker.errors.ImageNotFound as exc:
                raise ProvisionError(
                    f"The lab image {spec.image} is not on the lab machine. Ask the instructor "
                    "(labserver images build --push-to ...).",
                    reason="image-missing",
                    log=str(exc),
                ) from exc
            except ENGINE_ERRORS as exc:
                raise ProvisionError(
                    "The lab machine does not answer right now. Try again in a minute.",
                    reason="engine-down",
                    log=repr(exc),
                ) from exc
            except docker.errors.APIError as exc:
                raise ProvisionError(
                    "Your environment could not be started. The instructor can see why.",
                    reason="docker",
                    log=str(exc),
                ) from exc

    async def _create(self, spec: EnvSpec, say: ProgressCallback) -> EnvRef:
        await say("placing", "Looking for your environment")
        found = await self.engines.find(dc.container_name(spec.env_id, self.prefix))
        if found is None:
            found = await self.warm_pool.claim(spec, say)
        if found is None:
            container, node = await self.engines.provision(spec, say=say)
        else:
            container, node = found
            container = await self.engines.bring_up(container, node, spec.labs, say)
        ref = self._ref(container, node)
        await say("ready", "Your environment is ready")
        return ref

    async def status(self, ref: EnvRef) -> EnvStatus:
        def st(state: EnvState, message: str = "") -> EnvStatus:
            return EnvStatus(state, message or self._state(ref).notice, node=ref.node, device=ref.device)

        try:
            client = self.engines.client(ref.node)
            container = await self.engines.run(client.containers.get, ref.infra_id)
        except EnvironmentGone as exc:
            return st(EnvState.failed, exc.message)
        except docker.errors.NotFound:
            return st(EnvState.stopped, "The container is gone.")
        except (docker.errors.DockerException, *ENGINE_ERRORS):
            self.engines.engine_failed(ref.node)  # when it answers again, usage is re-read from labels
            return st(EnvState.failed, f"The lab machine {ref.node} does not answer.")
        state = container.attrs.get("State", {})
        if container.status == "running":
            return st(EnvState.ready)
        if container.status in ("created", "restarting"):
            return st(EnvState.provisioning, "Starting")
        if state.get("OOMKilled"):
            return st(EnvState.failed, "The container ran out of memory and stopped.")
        if container.status == "dead":
            return st(EnvState.failed, "The container died.")
        return st(EnvState.stopped, f"The container is {container.status}.")

    async def destroy(self, ref: EnvRef) -> None:
        try:
            client = self.engines.client(ref.node)
        except EnvironmentGone:
            return
        state = self._state(ref)
        name, volume = state.container, state.volume

        async def remove(fn: Callable[..., Any], ident: str) -> None:
            try:
                await self.engines.run(fn, ident, force=True)
            except docker.errors.NotFound:
                pass  # already gone: success
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or "in progress" not in str(exc):
                    raise

        try:
            for ident in dict.fromkeys((ref.infra_id, name)):
                await remove(client.api.remove_container, ident)
            self.engines.forget(ref.infra_id)
            # a volume is "in use" (409) until the container's removal has finished
            await backoff(
                lambda: remove(client.api.remove_volume, volume),
                attempts=8,
                first=0.1,
                retry_on=(docker.errors.APIError,),
            )
            await self.engines.drop_disk(volume)
        except ENGINE_ERRORS as exc:
            raise BackendError(
                f"The lab machine {ref.node} does not answer; try again.", reason="engine-down", log=repr(exc)
            ) from exc

    async def stop(self, ref: EnvRef) -> None:
        """Stop the container, keep it and its workspace (``create`` starts it again)."""
        with contextlib.suppress(docker.errors.NotFound):
            await self.engines.run(self.engines.client(ref.node).api.stop, ref.infra_id, timeout=5)
        self.engines.book.set_active(ref.infra_id, False)  # its CPU and memory are free for the queue

    async def discover(self) -> list[EnvRef]:
        refs = []
        for c, node in await self.engines.list(f"{dc.LABEL_INSTANCE}={self.prefix}"):
            role = c.labels.get(dc.LABEL_ROLE)
            if role == "env" or (role == "warm" and dc.env_id_from_name(c.name, self.prefix)):
                refs.append(self._ref(c, node))
        return sorted(refs, key=lambda r: r.env_id)

    # -- processes ---------------------------------------------------------------------------
    async def _exec(
        self,
        ref: EnvRef,
        argv: Sequence[str],
        timeout: float = 60.0,
        workdir: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        try:
            client = self.engines.client(ref.node)
            return await self.engines.run(
                Engines.exec_blocking, client, ref.infra_id, argv, timeout, workdir, env or {}
            )
        except ENGINE_ERRORS as exc:
            raise EnvironmentGone(
                f"The lab machine {ref.node} does not answer.", reason="engine-down", log=repr(exc)
            ) from exc

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
        rel = safe_relpath(cwd) if cwd else ""
        if readonly:
            await self._require_running(ref)
            return await self.engines.run(
                grader.run_readonly,
                self.engines.client(ref.node),
                env_id=ref.env_id,
                image=self._image(ref),
                volume=self._state(ref).volume,
                placement=self._placement(ref),
                argv=list(argv),
                cwd=rel,
                env=dict(env or {}),
                timeout_s=timeout,
                cpus=self._state(ref).cpus,
                memory_mb=self._state(ref).memory_mb,
                prefix=self.prefix,
            )
        if rel:
            await self._resolve(ref, rel)
        return await self._exec(ref, argv, timeout, files.abs_path(rel), env)

    def _image(self, ref: EnvRef) -> str:
        return self._state(ref).image or self.cfg.image

    async def _require_running(self, ref: EnvRef) -> None:
        status = await self.status(ref)
        if status.state != EnvState.ready:
            raise EnvironmentGone(status.message or "Your environment is not running.")

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        await self._require_running(ref)
        source = await asyncio.to_thread(request.checker.read_bytes)
        lab_files, checker_name = await asyncio.to_thread(grader.grader_lab_files, request.checker)
        start = time.monotonic()
        try:
            record = await self.engines.run(
                grader.run_in_grader,
                self.engines.client(ref.node),
                env_id=ref.env_id,
                image=self._image(ref),
                volume=self._state(ref).volume,
                placement=self._placement(ref),
                lab_id=safe_relpath(request.lab_id),
                checker_name=checker_name,
                checker_source=source,
                env=dict(request.env),
                lab_files=lab_files,
                timeout_s=request.timeout_s,
                log_limit=request.log_limit,
                cpus=self._state(ref).cpus,
                memory_mb=self._state(ref).memory_mb,
                prefix=self.prefix,
            )
        except ENGINE_ERRORS as exc:
            raise EnvironmentGone(
                f"The lab machine {ref.node} does not answer.", reason="engine-down", log=repr(exc)
            ) from exc
        return grader.record_to_raw(record, request, time.monotonic() - start)

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> DockerTerminal:
        workdir = dc.WORKSPACE
        if cwd:
            with contextlib.suppress(FileNotFoundError, PathRefused):
                workdir = await self._resolve(ref, cwd)
        client = self.engines.client(ref.node)
        try:
            exec_id, sock, token = await self.engines.run(
                open_terminal, client, ref.infra_id, cols, rows, workdir, {"PS1": r"\W$ "}
            )
        except docker.errors.NotFound as exc:
            raise EnvironmentGone() from exc
        except docker.errors.APIError as exc:
            raise EnvironmentGone("Your environment is not running.", log=str(exc)) from exc
        except ENGINE_ERRORS as exc:
            raise EnvironmentGone(
                f"The lab machine {ref.node} does not answer.", reason="engine-down"
            ) from exc
        return DockerTerminal(client, ref.infra_id, exec_id, sock, token)

    # -- files -------------------------------------------------------------------------------
    async def _sh(self, ref: EnvRef, script: str, *args: str, timeout: float = 60.0) -> ExecResult:
        return await self._exec(ref, ["sh", "-c", script, "sh", *args], timeout)

    async def _sh_answer(self, ref: EnvRef, script: str, *args: str, timeout: float = 60.0) -> ExecResult:
        """:meth:`_sh` for a script whose output is the answer (a path, a listing, a file): run
        :func:`files.marked`, again when the engine lost its output (read-only scripts only)."""
        for attempt in range(1, files.OUTPUT_ATTEMPTS + 1):
            mark = f"labserver-{uuid.uuid4().hex}"
            result = await self._exec(ref, ["sh", "-c", files.marked(script), mark, *args], timeout)
            answer = files.unmarked(result.stdout, mark.encode())
            if answer is not None:
                return dataclasses.replace(result, stdout=answer)
            if result.timed_out:
                return result
            log.warning(
                "%s: the engine lost the output of a file operation (attempt %d of %d; exit %s, %d bytes)",
                ref.env_id,
                attempt,
                files.OUTPUT_ATTEMPTS,
                result.exit_code,
                len(result.stdout),
            )
        raise BackendError(
            f"The lab machine {ref.node} dropped the answer to a file operation {files.OUTPUT_ATTEMPTS} "
            "times in a row: it is overloaded. Try again in a moment.",
            reason="engine-output",
        )

    async def _resolve(self, ref: EnvRef, rel: str) -> str:
        result = await self._sh_answer(ref, files.RESOLVE, files.abs_path(rel))
        self._raise_for(result, rel)
        return result.stdout.decode().strip()

    @staticmethod
    def _raise_for(result: ExecResult, rel: str) -> None:
        code = result.exit_code
        if code == 0:
            return
        if code == files.EXIT_REFUSED:
            raise PathRefused(rel)
        if code == files.EXIT_MISSING:
            raise FileNotFoundError(rel)
        if code == files.EXIT_ISDIR:
            raise IsADirectoryError(rel)
        raise OSError(f"{rel}: {result.stderr.decode(errors='replace').strip() or f'exit {code}'}")

    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]:
        rel = safe_relpath(path)
        result = await self._sh_answer(ref, files.LIST, files.abs_path(rel))
        if result.exit_code not in (0, 1) or (result.exit_code == 1 and not result.stdout):
            self._raise_for(result, rel)
        return files.parse_listing(result.stdout, rel)

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        rel = safe_relpath(path)
        if not rel:
            raise IsADirectoryError(path)
        result = await self._sh_answer(ref, files.READ, files.abs_path(rel), str(MAX_READ_BYTES))
        if result.exit_code == 1 and b"Permission denied" in result.stderr:
            raise PermissionError(rel)
        if result.exit_code == files.EXIT_TOO_BIG:
            raise TooBig(rel, int(result.stderr.strip() or 0), MAX_READ_BYTES)
        self._raise_for(result, rel)
        return result.stdout

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        rel = files.check_writable(path)
        tmp_name = f"{time.monotonic_ns()}"
        try:
            ok = await self.engines.run(
                self.engines.client(ref.node).api.put_archive,
                ref.infra_id,
                dc.WORKSPACE,
                files.file_tar(tmp_name, data),
            )
        except docker.errors.NotFound as exc:
            raise EnvironmentGone() from exc
        except docker.errors.APIError as exc:
            if files.NO_SPACE in str(exc).lower():
                raise WorkspaceFull(self.workspace_mb) from exc
            raise
        except ENGINE_ERRORS as exc:
            raise EnvironmentGone(
                f"The lab machine {ref.node} does not answer.", reason="engine-down"
            ) from exc
        if not ok:
            raise OSError(f"{rel}: could not write")
        result = await self._sh(
            ref, files.MOVE_INTO_PLACE, files.abs_path(rel), f"{dc.WORKSPACE}/{files.TMP_DIR}/{tmp_name}"
        )
        if result.exit_code and files.NO_SPACE in result.stderr.decode(errors="replace").lower():
            raise WorkspaceFull(self.workspace_mb)
        self._raise_for(result, rel)

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        lab_rel, backup = safe_relpath(lab.lab_id), safe_relpath(backup_name)
        if not lab_rel or "/" in lab_rel or not backup:
            raise PathRefused(lab.lab_id)
        result = await self._sh(ref, files.BACKUP_LAB, backup, lab_rel)
        if result.exit_code != 0:
            raise OSError(f"could not back up {lab_rel}: {result.stderr.decode(errors='replace')}")
        await self.engines.run(
            self.engines.client(ref.node).api.put_archive,
            ref.infra_id,
            dc.WORKSPACE,
            files.seed_tar(lab_rel, lab.starter),
        )
        return f".backups/{backup}/{lab_rel}"

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        rel = safe_relpath(path)
        resolved = await self._resolve(ref, rel)
        try:
            stream, _ = await self.engines.run(
                self.engines.client(ref.node).api.get_archive, ref.infra_id, resolved
            )
            raw = await self.engines.run(files.read_capped, stream, MAX_ARCHIVE_BYTES, rel)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(rel) from exc
        except docker.errors.APIError as exc:
            raise BackendError(
                f"The lab machine {ref.node} could not pack {rel or 'the workspace'}. Try again in a moment.",
                reason="engine",
                log=repr(exc),
            ) from exc
        arc_root = resolved.rstrip("/").rsplit("/", 1)[-1] or "workspace"
        return await asyncio.to_thread(files.tar_to_zip, raw, arc_root)

    async def prepare_event(self, event_id: int, template: EnvSpec, size: int | None = None) -> int:
        """Keep ``size`` (default ``LABSERVER_DOCKER__WARM_POOL``) warm containers for the event,
        made from ``template`` (its image, the largest cpus/memory of its labs, all its labs as
        seeds); returns how many were created now. Size 0 stops warming the event."""
        size = self.cfg.warm_pool if size is None else size
        self.warm_pool.configure(event_id, template, size)
        if size <= 0:
            await self.warm_pool.drain(event_id)
            return 0
        return await self.warm_pool.fill(event_id)

    async def stale_graders(self, older_than_s: float = 600.0) -> list[Any]:
        """Grader containers of this prefix older than ``older_than_s`` (a live check never lasts
        that long): left behind by a server that died mid-check."""
        stale = []
        for container, _node in await self.engines.list(f"{dc.LABEL_INSTANCE}={self.prefix}"):
            if container.labels.get(dc.LABEL_ROLE) != "grader":
                continue
            created = dt.datetime.fromisoformat(container.attrs["Created"][:26].rstrip("Z") + "+00:00")
            if (clock.now() - created).total_seconds() >= older_than_s:
                stale.append(container)
        return stale

    async def remove_container(self, container: Any) -> None:
        """Remove a container this backend listed (``stale_graders``); gone already is success."""
        with contextlib.suppress(docker.errors.NotFound):
            await self.engines.run(container.remove, force=True)

    def engine_stats(self) -> dict[str, Any]:
        """Per engine (node name of each distinct engine): ``slots`` = create/start calls bounded by
        ``LABSERVER_DOCKER__ENGINE_CONCURRENCY`` (``limit``, ``in_use`` and ``waiting`` now; ``calls``,
        ``waits``, ``wait_s_total``, ``wait_s_max`` since start) and ``usage`` = what placement
        counts (``count``, ``cpus``, ``memory_mb``, ``cards``). Cheap, no engine call: for metrics."""
        return self.engines.engine_stats()

    async def aclose(self) -> None:
        """Close the engine clients and the thread pool."""
        self.engines.close()
