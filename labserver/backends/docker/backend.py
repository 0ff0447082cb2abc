"""The Docker backend: one hardened container per attendee, on one or more Docker engines.

- Names are deterministic (``labserver-<escaped env id>``, volume ``labserver-ws-<escaped env id>``)
  and every object carries ``labserver.*`` labels, so ``create`` is idempotent and ``discover``
  re-adopts containers after a restart. Which node and which Ascend card an environment holds is
  read back from its labels: the containers are the source of truth, not server memory.
- Configs come from the pure builders in :mod:`docker_config`; placement from :mod:`scheduler`.
- Checks run in a separate grader container (:mod:`docker_grader`); terminals are TTY execs
  (:mod:`docker_terminal`); files go through the API as the attendee's uid (:mod:`docker_files`).
- The Docker SDK is blocking: calls run in a thread pool of our own so that slow execs never starve
  the event loop's default executor. An engine that does not answer gives ``EnvState.failed`` from
  ``status`` and a ``ProvisionError(reason="engine-down")`` from ``create``, never a hang.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from labserver.backends.base import (
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
    safe_relpath,
)
from labserver.backends.docker import config as dc
from labserver.backends.docker import files, grader
from labserver.backends.docker.scheduler import Node, NoRoom, Placement, Running, Usage, load_nodes, place
from labserver.backends.docker.terminal import DockerTerminal, open_terminal
from labserver.config import DockerSettings, Settings

T = TypeVar("T")
ENGINE_ERRORS = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError)


async def backoff(
    fn: Callable[[], Any],
    *,
    attempts: int = 8,
    first: float = 0.05,
    factor: float = 2.0,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
) -> Any:
    """The one retry helper: call ``fn`` (a coroutine function) until it succeeds, sleeping
    first, first*factor, ... between attempts; re-raises the last error."""
    delay = first
    for attempt in range(attempts):
        try:
            return await fn()
        except retry_on:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(delay)
            delay *= factor
    raise AssertionError("unreachable")


def nodes_from_settings(settings: DockerSettings) -> list[Node]:
    if settings.nodes_file:
        return load_nodes(settings.nodes_file)
    nodes = []
    for i, url in enumerate(settings.hosts):
        name = "local" if url == "unix:///var/run/docker.sock" else f"node{i + 1}"
        nodes.append(Node(name=name, url=url, kind="cpu", cpus=0, memory_mb=0))  # capacity from the engine
    return nodes


GRADER_SKIP = {"solution", "steps", "__pycache__", ".git"}
GRADER_MAX_BYTES = 64 * 1024 * 1024


def grader_lab_files(checker: Path) -> tuple[list[tuple[str, bytes]], str]:
    """The lab's trusted files the grader gets (all but ``solution/`` and ``steps/``) and the
    checker's path among them. A checker outside a lab's ``checks/`` folder travels alone."""
    checker = checker.resolve()
    if checker.parent.name != "checks" or not (checker.parent.parent / "lab.yaml").is_file():
        return [], checker.name
    root = checker.parent.parent
    files: list[tuple[str, bytes]] = []
    total = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (
            rel.parts[0] in GRADER_SKIP
            or "__pycache__" in rel.parts
            or not path.is_file()
            or path.is_symlink()
        ):
            continue
        if rel.as_posix() == f"checks/{checker.name}":
            continue  # sent as the checker itself
        data = path.read_bytes()
        total += len(data)
        if total > GRADER_MAX_BYTES:
            raise EnvironmentGone(
                f"The lab folder {root.name} is too big to send to a grader.", reason="lab-too-big"
            )
        files.append((rel.as_posix(), data))
    return files, f"lab/checks/{checker.name}"


class DockerBackend:
    name = "docker"

    def __init__(
        self,
        settings: Settings,
        *,
        nodes: list[Node] | None = None,
        warm_pool: Any | None = None,
        prefix: str | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.docker
        #: names are ``<prefix>-<env id>``; discover() adopts only this prefix's containers
        self.prefix = prefix or self.cfg.name_prefix or dc.DEFAULT_PREFIX
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", self.prefix):
            raise ValueError(f"docker name prefix {self.prefix!r}: use [a-z0-9.-]")
        self._configured = nodes if nodes is not None else nodes_from_settings(self.cfg)
        self._nodes: dict[str, Node] = {}
        self._clients: dict[str, docker.DockerClient] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="docker")
        self._place_lock = asyncio.Lock()
        self._env_locks: dict[str, asyncio.Lock] = {}
        self._reserved: dict[str, Running] = {}  # placed, container not made yet
        self.warm_pool = warm_pool

    # -- engines -----------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kw))

    def client(self, node: str) -> docker.DockerClient:
        if node not in self._clients:
            url = self.node(node).url
            # ssh:// goes through the system's ssh client (keys/agent as the server's user), not paramiko
            self._clients[node] = docker.DockerClient(
                base_url=url,
                version="auto",
                timeout=30,
                max_pool_size=64,
                use_ssh_client=url.startswith("ssh://"),
            )
        return self._clients[node]

    def node(self, name: str) -> Node:
        for n in self._configured:
            if n.name == name:
                return self._nodes.get(name, n)
        raise EnvironmentGone(f"The lab machine {name!r} is not configured any more.", reason="node")

    async def nodes(self) -> list[Node]:
        """The configured nodes; capacity 0 is filled in from the engine (``docker info``)."""
        out = []
        for n in self._configured:
            if n.name not in self._nodes:
                if n.cpus and n.memory_mb:
                    self._nodes[n.name] = n
                else:
                    try:
                        info = await self._run(self.client(n.name).info)
                    except (docker.errors.DockerException, *ENGINE_ERRORS):
                        continue  # down: not placeable now; retried next time
                    self._nodes[n.name] = Node(
                        **{
                            **n.__dict__,
                            "cpus": float(info["NCPU"]),
                            "memory_mb": int(info["MemTotal"] // 2**20),
                        }
                    )
            out.append(self._nodes[n.name])
        return out

    def _engines(self) -> list[str]:
        """One node name per distinct engine URL (several nodes may share an engine)."""
        seen: dict[str, str] = {}
        for n in self._configured:
            seen.setdefault(n.url, n.name)
        return list(seen.values())

    def _node_of(self, container: Any, default: str) -> str | None:
        """The node a container was placed on (its label); None when the label names a node this
        server does not know (another configuration sharing the engine: not ours to count)."""
        label = container.labels.get("labserver.node", "")
        if not label:
            return default
        return label if any(n.name == label for n in self._configured) else None

    async def _list(self, label: str) -> list[tuple[Any, str]]:
        """Containers carrying ``label`` on every reachable engine, with their node names."""
        out: list[tuple[Any, str]] = []
        for engine in self._engines():
            try:
                containers = await self._run(
                    self.client(engine).containers.list, all=True, filters={"label": label}
                )
            except (docker.errors.DockerException, *ENGINE_ERRORS):
                continue
            for c in containers:
                node = self._node_of(c, engine)
                if node is not None:
                    out.append((c, node))
        return out

    async def usage(self) -> Usage:
        """What every labserver container on the engines holds (all instances: cards are never
        shared, even between two servers on one engine)."""
        usage = Usage()
        for c, node in await self._list(dc.LABEL_ROLE):
            lab = c.labels
            if lab.get(dc.LABEL_ROLE) not in ("env", "warm"):
                continue
            card = lab.get("labserver.card")
            usage.envs.append(
                Running(
                    lab.get(dc.LABEL_ENV, c.name),
                    node,
                    float(lab.get("labserver.cpus", 1)),
                    int(lab.get("labserver.memory_mb", 0)),
                    int(card) if card is not None else None,
                )
            )
        return usage

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
        card = lab.get("labserver.card")
        return EnvRef(
            env_id=env_id,
            backend=self.name,
            infra_id=container.id,
            node=node,
            device=lab.get("labserver.device", "cpu-emu"),
            data={
                "container": container.name,
                "volume": volume,
                "image": lab.get("labserver.image", ""),
                "card": int(card) if card is not None else None,
                "notice": lab.get("labserver.notice", ""),
                "cpus": float(lab.get("labserver.cpus", 1)),
                "memory_mb": int(lab.get("labserver.memory_mb", 0)),
            },
        )

    def _placement(self, ref: EnvRef) -> Placement:
        return Placement(self.node(ref.node), ref.data.get("card"))

    async def _find(self, env_id: str) -> tuple[Any, str] | None:
        """The container of ``env_id`` on any reachable engine (by its deterministic name)."""
        name = dc.container_name(env_id, self.prefix)
        for engine in self._engines():
            try:
                container = await self._run(self.client(engine).containers.get, name)
            except (docker.errors.DockerException, *ENGINE_ERRORS):
                continue
            return container, self._node_of(container, engine) or engine
        return None

    # -- lifecycle ---------------------------------------------------------------------------
    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
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
        found = await self._find(spec.env_id)
        if found is None and self.warm_pool is not None:
            found = await self.warm_pool.claim(self, spec, say)
        if found is None:
            async with self._place_lock:  # only the decision is serialised, not the creation
                await say("placing", "Choosing a lab machine")
                usage = await self.usage()
                usage.envs.extend(
                    r for r in self._reserved.values() if r.env_id not in {e.env_id for e in usage.envs}
                )
                try:
                    placement = place(
                        await self.nodes(),
                        usage,
                        device=spec.device,
                        cpus=spec.cpus,
                        memory_mb=spec.memory_mb,
                    )
                except NoRoom as exc:
                    raise ProvisionError(exc.message, reason=exc.reason) from exc
                self._reserved[spec.env_id] = Running(
                    spec.env_id, placement.node.name, spec.cpus, spec.memory_mb, placement.card
                )
            try:
                container = await self._make(spec, placement, say)
            finally:
                self._reserved.pop(spec.env_id, None)
            found = (container, placement.node.name)
        container, node = found
        client = self.client(node)
        if container.status != "running":
            await say("starting", "Starting your container")
            await self._run(container.start)
        await self._wait_ready(client, container.id)
        await self._run(container.reload)
        ref = self._ref(container, node)
        await self._seed(client, container.id, spec.labs, say)
        await say("ready", "Your environment is ready")
        return ref

    async def _make(self, spec: EnvSpec, placement: Placement, say: ProgressCallback) -> Any:
        if placement.notice:
            await say("notice", placement.notice)
        client = self.client(placement.node.name)
        image = dc.image_for(spec, self.cfg)
        await say("pulling", f"Checking the lab image on {placement.node.name} (nothing to download)")
        await self._run(client.images.get, image)
        await say("creating", "Creating your container")
        config = dc.make_container_config(spec, self.cfg, placement, prefix=self.prefix)
        await self._run(
            client.volumes.create,
            name=dc.volume_name(spec.env_id, self.prefix),
            labels={
                dc.LABEL_ENV: spec.env_id,
                dc.LABEL_INSTANCE: self.prefix,
                "labserver.event": str(spec.event_id),
            },
        )
        try:
            return await self._run(client.containers.create, **config)
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: a concurrent create won; use that one
                raise
            return await self._run(client.containers.get, config["name"])

    async def _wait_ready(self, client: docker.DockerClient, cid: str) -> None:
        async def probe() -> None:
            result = await self._run(self._exec_blocking, client, cid, ["true"], 10.0, "", {})
            if result.exit_code != 0:
                raise ProvisionError("The container started but does not answer.", reason="not-ready")

        try:
            await backoff(probe, attempts=10, retry_on=(ProvisionError, docker.errors.APIError))
        except docker.errors.APIError as exc:
            raise ProvisionError(
                "Your container stopped right after starting. The instructor can see why.",
                reason="crashed",
                log=str(exc),
            ) from exc

    async def _seed(
        self, client: docker.DockerClient, cid: str, labs: Sequence[LabSeed], say: ProgressCallback
    ) -> None:
        if not labs:
            return
        listing = await self._run(self._exec_blocking, client, cid, ["ls", "-A", dc.WORKSPACE], 20.0, "", {})
        present = set(listing.stdout.decode(errors="replace").split())
        missing = [lab for lab in labs if lab.lab_id not in present]
        if missing:
            await say("seeding", "Copying the lab files into your workspace")
        for lab in missing:
            ok = await self._run(
                client.api.put_archive, cid, dc.WORKSPACE, files.seed_tar(lab.lab_id, lab.starter)
            )
            if not ok:
                raise ProvisionError("Could not copy the lab files into your workspace.", reason="seed")

    async def status(self, ref: EnvRef) -> EnvStatus:
        def st(state: EnvState, message: str = "") -> EnvStatus:
            notice = ref.data.get("notice", "")
            return EnvStatus(state, message or notice, node=ref.node, device=ref.device)

        try:
            client = self.client(ref.node)
            container = await self._run(client.containers.get, ref.infra_id)
        except EnvironmentGone as exc:
            return st(EnvState.failed, exc.message)
        except docker.errors.NotFound:
            return st(EnvState.stopped, "The container is gone.")
        except (docker.errors.DockerException, *ENGINE_ERRORS):
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
            client = self.client(ref.node)
        except EnvironmentGone:
            return
        name = ref.data.get("container") or dc.container_name(ref.env_id, self.prefix)
        volume = ref.data.get("volume") or dc.volume_name(ref.env_id, self.prefix)

        async def remove(fn: Callable[..., Any], ident: str) -> None:
            try:
                await self._run(fn, ident, force=True)
            except docker.errors.NotFound:
                pass  # already gone: success
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or "in progress" not in str(exc):
                    raise

        try:
            for ident in dict.fromkeys((ref.infra_id, name)):
                await remove(client.api.remove_container, ident)
            # a volume is "in use" (409) until the container's removal has finished
            await backoff(
                lambda: remove(client.api.remove_volume, volume),
                attempts=8,
                first=0.1,
                retry_on=(docker.errors.APIError,),
            )
        except ENGINE_ERRORS as exc:
            raise BackendError(
                f"The lab machine {ref.node} does not answer; try again.", reason="engine-down", log=repr(exc)
            ) from exc

    async def stop(self, ref: EnvRef) -> None:
        """Stop the container, keep it and its workspace (``create`` starts it again)."""
        with contextlib.suppress(docker.errors.NotFound):
            await self._run(self.client(ref.node).api.stop, ref.infra_id, timeout=5)

    async def discover(self) -> list[EnvRef]:
        refs = []
        for c, node in await self._list(f"{dc.LABEL_INSTANCE}={self.prefix}"):
            role = c.labels.get(dc.LABEL_ROLE)
            if role == "env" or (role == "warm" and dc.env_id_from_name(c.name, self.prefix)):
                refs.append(self._ref(c, node))
        return sorted(refs, key=lambda r: r.env_id)

    # -- processes ---------------------------------------------------------------------------
    @staticmethod
    def _exec_blocking(
        client: docker.DockerClient,
        cid: str,
        argv: Sequence[str],
        timeout: float,
        workdir: str,
        env: Mapping[str, str],
    ) -> ExecResult:
        start = time.monotonic()
        wrapped = ["timeout", "-s", "TERM", "-k", "2", f"{max(timeout, 0.1):g}", *argv]
        try:
            exec_id = client.api.exec_create(
                cid, wrapped, user=dc.USER, workdir=workdir or dc.WORKSPACE, environment=dict(env)
            )["Id"]
            out, err = client.api.exec_start(exec_id, demux=True)
            code = client.api.exec_inspect(exec_id).get("ExitCode")
        except docker.errors.NotFound as exc:
            raise EnvironmentGone() from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise EnvironmentGone("Your environment is not running.") from exc
            raise
        elapsed = time.monotonic() - start
        timed_out = code in (124, 137) and elapsed >= timeout * 0.95
        return ExecResult(None if timed_out else code, out or b"", err or b"", timed_out, elapsed)

    async def _exec(
        self,
        ref: EnvRef,
        argv: Sequence[str],
        timeout: float = 60.0,
        workdir: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        try:
            client = self.client(ref.node)
            return await self._run(
                self._exec_blocking, client, ref.infra_id, argv, timeout, workdir, env or {}
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
            return await self._run(
                grader.run_readonly,
                self.client(ref.node),
                env_id=ref.env_id,
                image=self._image(ref),
                volume=ref.data.get("volume") or dc.volume_name(ref.env_id, self.prefix),
                placement=self._placement(ref),
                argv=list(argv),
                cwd=rel,
                env=dict(env or {}),
                timeout_s=timeout,
                cpus=float(ref.data.get("cpus") or 1.0),
                memory_mb=int(ref.data.get("memory_mb") or 2048),
                prefix=self.prefix,
            )
        if rel:
            await self._resolve(ref, rel)
        return await self._exec(ref, argv, timeout, files.abs_path(rel), env)

    def _image(self, ref: EnvRef) -> str:
        return str(ref.data.get("image") or self.cfg.image)

    async def _require_running(self, ref: EnvRef) -> None:
        status = await self.status(ref)
        if status.state != EnvState.ready:
            raise EnvironmentGone(status.message or "Your environment is not running.")

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        await self._require_running(ref)
        source = await asyncio.to_thread(request.checker.read_bytes)
        lab_files, checker_name = await asyncio.to_thread(grader_lab_files, request.checker)
        start = time.monotonic()
        try:
            record = await self._run(
                grader.run_in_grader,
                self.client(ref.node),
                env_id=ref.env_id,
                image=self._image(ref),
                volume=ref.data.get("volume") or dc.volume_name(ref.env_id, self.prefix),
                placement=self._placement(ref),
                lab_id=safe_relpath(request.lab_id),
                checker_name=checker_name,
                checker_source=source,
                env=dict(request.env),
                lab_files=lab_files,
                timeout_s=request.timeout_s,
                log_limit=request.log_limit,
                cpus=float(ref.data.get("cpus") or 1.0),
                memory_mb=int(ref.data.get("memory_mb") or 2048),
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
        client = self.client(ref.node)
        try:
            exec_id, sock, token = await self._run(
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

    async def _resolve(self, ref: EnvRef, rel: str) -> str:
        result = await self._sh(ref, files.RESOLVE, files.abs_path(rel))
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
        result = await self._sh(ref, files.LIST, files.abs_path(rel))
        if result.exit_code not in (0, 1) or (result.exit_code == 1 and not result.stdout):
            self._raise_for(result, rel)
        return files.parse_listing(result.stdout, rel)

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        rel = safe_relpath(path)
        if not rel:
            raise IsADirectoryError(path)
        result = await self._sh(ref, files.READ, files.abs_path(rel))
        if result.exit_code == 1 and b"Permission denied" in result.stderr:
            raise PermissionError(rel)
        self._raise_for(result, rel)
        return result.stdout

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        rel = files.check_writable(path)
        tmp_name = f"{time.monotonic_ns()}"
        try:
            ok = await self._run(
                self.client(ref.node).api.put_archive,
                ref.infra_id,
                dc.WORKSPACE,
                files.file_tar(tmp_name, data),
            )
        except docker.errors.NotFound as exc:
            raise EnvironmentGone() from exc
        except ENGINE_ERRORS as exc:
            raise EnvironmentGone(
                f"The lab machine {ref.node} does not answer.", reason="engine-down"
            ) from exc
        if not ok:
            raise OSError(f"{rel}: could not write")
        result = await self._sh(
            ref, files.MOVE_INTO_PLACE, files.abs_path(rel), f"{dc.WORKSPACE}/{files.TMP_DIR}/{tmp_name}"
        )
        self._raise_for(result, rel)

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        lab_rel, backup = safe_relpath(lab.lab_id), safe_relpath(backup_name)
        if not lab_rel or "/" in lab_rel or not backup:
            raise PathRefused(lab.lab_id)
        result = await self._sh(ref, files.BACKUP_LAB, backup, lab_rel)
        if result.exit_code != 0:
            raise OSError(f"could not back up {lab_rel}: {result.stderr.decode(errors='replace')}")
        await self._run(
            self.client(ref.node).api.put_archive,
            ref.infra_id,
            dc.WORKSPACE,
            files.seed_tar(lab_rel, lab.starter),
        )
        return f".backups/{backup}/{lab_rel}"

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        rel = safe_relpath(path)
        resolved = await self._resolve(ref, rel)
        try:
            stream, _ = await self._run(self.client(ref.node).api.get_archive, ref.infra_id, resolved)
            raw = await self._run(lambda: b"".join(stream))
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(rel) from exc
        arc_root = resolved.rstrip("/").rsplit("/", 1)[-1] or "workspace"
        return await asyncio.to_thread(files.tar_to_zip, raw, arc_root)

    async def prepare_event(self, event_id: int, template: EnvSpec, size: int | None = None) -> int:
        """Keep ``size`` (default ``LABSERVER_DOCKER__WARM_POOL``) warm containers for the event,
        made from ``template`` (its image, the largest cpus/memory of its labs, all its labs as
        seeds); returns how many were created now. Size 0 stops warming the event."""
        from labserver.backends.docker.warmpool import WarmPool

        size = self.cfg.warm_pool if size is None else size
        pool = self.warm_pool or WarmPool(self)
        pool.configure(event_id, template, size)
        if size <= 0:
            await pool.drain(event_id)
            return 0
        return int(await pool.fill(event_id))

    async def aclose(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
