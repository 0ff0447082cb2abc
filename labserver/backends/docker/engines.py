"""The Docker engines an installation uses, and the one path that makes a container.

:class:`Engines` holds what every part of the Docker backend shares: a client per engine (local
socket, ``tcp://``, ``ssh://``), a thread pool of its own for the blocking SDK (slow execs must never
starve the event loop's default executor), the node list with capacity read from ``docker info``,
listing by label across engines, the usage the scheduler places against (kept in memory by
:class:`~.usage.UsageBook`, rebuilt from labels), the placement lock with its reservations, and the
per-engine bound on concurrent create / start calls (:class:`~.slots.EngineSlots`).

:meth:`Engines.provision` is the one make / wait-ready / seed path. ``DockerBackend.create`` uses it
for an attendee's container and :class:`~labserver.backends.docker.warmpool.WarmPool` for a warm one
(role ``warm``, its own name and volume), so both get the same placement (under the lock, with a
reservation until the container exists), the same volume labels and the same handling of a
concurrent create (409: the other one won, use its container).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from labserver.backends.base import (
    EnvironmentGone,
    EnvSpec,
    ExecResult,
    LabSeed,
    ProgressCallback,
    ProvisionError,
    backoff,
)
from labserver.backends.docker import config as dc
from labserver.backends.docker import disk, files
from labserver.backends.docker.scheduler import Node, NoRoom, Placement, Running, Usage, load_nodes, place
from labserver.backends.docker.slots import EngineSlots
from labserver.backends.docker.usage import UsageBook
from labserver.config import DockerSettings
from labserver.observability import metrics

log = logging.getLogger(__name__)

T = TypeVar("T")
ENGINE_ERRORS = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError)
#: a node whose engine did not answer is not asked again for this long: with a frozen engine every
#: placement (under the placement lock) would otherwise wait the whole engine timeout in turn
DOWN_RETRY_S = 10.0


def nodes_from_settings(settings: DockerSettings) -> list[Node]:
    if settings.nodes_file:
        return load_nodes(settings.nodes_file)
    nodes = []
    for i, url in enumerate(settings.hosts):
        name = "local" if url == "unix:///var/run/docker.sock" else f"node{i + 1}"
        nodes.append(Node(name=name, url=url, kind="cpu", cpus=0, memory_mb=0))  # capacity from the engine
    return nodes


async def _quiet(phase: str, message: str) -> None:
    pass


class Engines:
    """Clients, threads, nodes, usage and the container-making path of one Docker backend (see
    the module docstring). ``prefix`` names and labels everything this installation makes."""

    def __init__(self, cfg: DockerSettings, nodes: list[Node], prefix: str) -> None:
        self.cfg = cfg
        self.prefix = prefix
        self.configured = nodes
        self._nodes: dict[str, Node] = {}
        self._clients: dict[str, docker.DockerClient] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="docker")
        self._place_lock = asyncio.Lock()
        self._reserved: dict[str, Running] = {}  # placed, container not made yet
        #: where workspace images go when ``cfg.workspace_mb`` limits volumes (disk.py); None: never
        self.disks_dir: Path | None = None
        #: what each engine holds, in memory (placement lists nothing; rebuilt from labels when due)
        self.book = UsageBook(self._list_held, max_age_s=cfg.usage_resync_s, retry_s=DOWN_RETRY_S)
        self._down_until: dict[str, float] = {}  # node -> monotonic time to ask its engine again
        #: at most ``cfg.engine_concurrency`` create / start calls at once per engine
        self.slots = EngineSlots(cfg.engine_concurrency)

    # -- clients and threads -----------------------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """``fn(*args, **kw)`` (a blocking SDK call) on this backend's own threads."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, lambda: fn(*args, **kw))
        except Exception as exc:
            metrics.ENGINE_ERRORS.labels("docker", type(exc).__name__).inc()
            raise

    def client(self, node: str) -> docker.DockerClient:
        if node not in self._clients:
            url = self.node(node).url
            # ssh:// goes through the system's ssh client (keys/agent as the server's user), not paramiko
            self._clients[node] = docker.DockerClient(
                base_url=url,
                version=self.cfg.api_version,
                timeout=self.cfg.engine_timeout_s,
                max_pool_size=64,
                use_ssh_client=url.startswith("ssh://"),
            )
        return self._clients[node]

    def close(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- nodes -------------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.configured:
            if n.name == name:
                return self._nodes.get(name, n)
        raise EnvironmentGone(f"The lab machine {name!r} is not configured any more.", reason="node")

    async def nodes(self) -> list[Node]:
        """The configured nodes that answer; capacity 0 is filled in from the engine (``docker info``).
        Raises :class:`ProvisionError` (``engine-down``) naming the machines when none answers."""
        out = []
        down: list[str] = []
        now = time.monotonic()
        for n in self.configured:
            if n.name not in self._nodes:
                if self._down_until.get(n.name, 0.0) > now:
                    down.append(f"{n.name} ({n.url})")  # failed moments ago: do not wait on it again
                    continue
                if n.cpus and n.memory_mb:
                    self._nodes[n.name] = n
                else:
                    try:
                        info = await self.run(self.client(n.name).info)
                    except (docker.errors.DockerException, *ENGINE_ERRORS) as exc:
                        log.warning("lab machine %s (%s) does not answer: %r", n.name, n.url, exc)
                        down.append(f"{n.name} ({n.url})")
                        self._down_until[n.name] = time.monotonic() + DOWN_RETRY_S
                        continue  # down: not placeable now; retried after DOWN_RETRY_S
                    self._nodes[n.name] = Node(
                        **{
                            **n.__dict__,
                            "cpus": float(info["NCPU"]),
                            "memory_mb": int(info["MemTotal"] // 2**20),
                        }
                    )
            out.append(self._nodes[n.name])
        if down and not out:
            raise ProvisionError(
                f"The lab machine{'s' if len(down) > 1 else ''} {', '.join(down)} "
                f"did not answer within {self.cfg.engine_timeout_s:g} s. Try again in a minute; "
                "if it keeps failing, tell the instructor (the Docker engine may be down or stuck).",
                reason="engine-down",
            )
        return out

    def engines(self) -> list[str]:
        """One node name per distinct engine URL (several nodes may share an engine)."""
        seen: dict[str, str] = {}
        for n in self.configured:
            seen.setdefault(n.url, n.name)
        return list(seen.values())

    def engine_of(self, node: str) -> str:
        """The name :meth:`engines` gives ``node``'s engine (the first node with its URL)."""
        url = self.node(node).url
        return next(n.name for n in self.configured if n.url == url)

    def node_of(self, container: Any, default: str) -> str | None:
        """The node a container was placed on (its label); None when the label names a node this
        server does not know (another configuration sharing the engine: not ours to count)."""
        return self._node_of_labels(container.labels, default)

    def _node_of_labels(self, labels: Mapping[str, str], default: str) -> str | None:
        label = labels.get("labserver.node", "")
        if not label:
            return default
        return label if any(n.name == label for n in self.configured) else None

    # -- what exists -------------------------------------------------------------------------------
    async def list(self, label: str) -> list[tuple[Any, str]]:
        """Containers carrying ``label`` on every reachable engine, with their node names."""
        out: list[tuple[Any, str]] = []
        for engine in self.engines():
            try:
                containers = await self.run(
                    self.client(engine).containers.list, all=True, filters={"label": label}
                )
            except (docker.errors.DockerException, *ENGINE_ERRORS):
                continue
            for c in containers:
                node = self.node_of(c, engine)
                if node is not None:
                    out.append((c, node))
        return out

    async def find(self, name: str) -> tuple[Any, str] | None:
        """The container called ``name`` on any reachable engine, with its node."""
        for engine in self.engines():
            try:
                container = await self.run(self.client(engine).containers.get, name)
            except (docker.errors.DockerException, *ENGINE_ERRORS):
                continue
            return container, self.node_of(container, engine) or engine
        return None

    async def _list_held(self, engine: str) -> Sequence[tuple[str, Mapping[str, str], str, str]]:
        """(id, labels, node, state) of every labserver container on ``engine``, all instances (cards are
        never shared, even between two servers on one engine): one API call, no inspect per
        container. Raises when the engine does not answer (:class:`UsageBook` keeps its entries)."""
        raw = await self.run(self.client(engine).api.containers, all=True, filters={"label": dc.LABEL_ROLE})
        out = []
        for c in raw:
            labels = c.get("Labels") or {}
            node = self._node_of_labels(labels, engine)
            if node is not None:
                out.append((c["Id"], labels, node, str(c.get("State") or "running")))
        return out

    async def usage(self) -> Usage:
        """What every labserver container on the engines holds, from memory (:class:`UsageBook`;
        an engine's entries are rebuilt from labels when due)."""
        return await self.book.usage(self.engines())

    def engine_failed(self, node: str) -> None:
        """A call to ``node``'s engine failed: re-read its usage from labels at the next decision."""
        with contextlib.suppress(EnvironmentGone):
            self.book.mark_stale(self.engine_of(node))

    def forget(self, container_id: str) -> None:
        """A container was removed: its CPU, memory and card are free for the next placement."""
        self.book.remove(container_id)

    def slot(self, node: str) -> Any:
        """``async with engines.slot(node):`` around a create / start call on ``node``'s engine."""
        return self.slots.slot(self.engine_of(node))

    def engine_stats(self) -> dict[str, Any]:
        """Per engine: ``slots`` (:meth:`EngineSlots.stats`: limit, in_use, waiting, calls, waits,
        wait_s_total, wait_s_max) and ``usage`` (count, cpus, memory_mb, cards). For metrics."""
        usage = self.book.counts()
        slots = self.slots.stats()
        return {e: {"slots": slots.get(e, {}), "usage": usage.get(e, {})} for e in self.engines()}

    # -- processes ---------------------------------------------------------------------------------
    @staticmethod
    def exec_blocking(
        client: docker.DockerClient,
        cid: str,
        argv: Sequence[str],
        timeout: float,
        workdir: str,
        env: Mapping[str, str],
    ) -> ExecResult:
        """Run ``argv`` in the container as the attendee's uid, killed after ``timeout`` seconds."""
        start = time.monotonic()
        wrapped = ["timeout", "-s", "TERM", "-k", "2", f"{max(timeout, 0.1):g}", *argv]
        try:
            exec_id = client.api.exec_create(
                cid, wrapped, user=dc.USER, workdir=workdir or dc.WORKSPACE, environment=dict(env)
            )["Id"]
            out, err = client.api.exec_start(exec_id, demux=True)
            code = Engines.exit_code(client, exec_id)
        except docker.errors.NotFound as exc:
            raise EnvironmentGone() from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise EnvironmentGone("Your environment is not running.") from exc
            raise
        elapsed = time.monotonic() - start
        timed_out = code in (124, 137) and elapsed >= timeout * 0.95
        return ExecResult(None if timed_out else code, out or b"", err or b"", timed_out, elapsed)

    @staticmethod
    def exit_code(client: docker.DockerClient, exec_id: str, wait_s: float = 5.0) -> int | None:
        """The exit code of a finished exec. Its output can end before the engine has recorded the
        exit (``Running`` still true, ``ExitCode`` null), so it is asked again for up to ``wait_s``."""
        info = client.api.exec_inspect(exec_id)
        deadline = time.monotonic() + wait_s
        while info.get("Running") and time.monotonic() < deadline:
            time.sleep(0.01)
            info = client.api.exec_inspect(exec_id)
        code = info.get("ExitCode")
        return int(code) if code is not None else None

    # -- the one make / wait-ready / seed path -----------------------------------------------------
    async def provision(
        self,
        spec: EnvSpec,
        *,
        role: str = "env",
        name: str | None = None,
        volume: str | None = None,
        say: ProgressCallback = _quiet,
    ) -> tuple[Any, str]:
        """Place, make, start, wait until it answers and seed a new container for ``spec``;
        returns (container, node). ``role="warm"`` with its own ``name`` and ``volume`` makes a
        warm-pool container. Raises :class:`ProvisionError` (``no-room``, ``no-card``, ...)."""
        async with self._place_lock:  # only the decision is serialised, not the creation
            await say("placing", "Choosing a lab machine")
            usage = await self.usage()  # from memory: no engine call unless a rebuild is due
            usage.envs.extend(
                r for r in self._reserved.values() if r.env_id not in {e.env_id for e in usage.envs}
            )
            try:
                placement = place(
                    await self.nodes(), usage, device=spec.device, cpus=spec.cpus, memory_mb=spec.memory_mb
                )
            except NoRoom as exc:
                raise ProvisionError(exc.message, reason=exc.reason) from exc
            self._reserved[spec.env_id] = Running(
                spec.env_id, placement.node.name, spec.cpus, spec.memory_mb, placement.card
            )
        node = placement.node.name
        try:
            container = await self._make(spec, placement, role=role, name=name, volume=volume, say=say)
            self.book.add(self.engine_of(node), container.id, self._reserved[spec.env_id])
        except ENGINE_ERRORS:
            self.engine_failed(node)  # it comes back: count from its labels again
            raise
        finally:
            self._reserved.pop(spec.env_id, None)
        return await self.bring_up(container, node, spec.labs, say), node

    async def _make(
        self,
        spec: EnvSpec,
        placement: Placement,
        *,
        role: str,
        name: str | None,
        volume: str | None,
        say: ProgressCallback,
    ) -> Any:
        if placement.notice:
            await say("notice", placement.notice)
        client = self.client(placement.node.name)
        image = dc.image_for(spec, self.cfg)
        await say("pulling", f"Checking the lab image on {placement.node.name} (nothing to download)")
        await self.run(client.images.get, image)
        await say("creating", "Creating your container")
        volume = volume or dc.volume_name(spec.env_id, self.prefix)
        config = dc.make_container_config(
            spec, self.cfg, placement, name=name, volume=volume, role=role, prefix=self.prefix
        )
        opts = await self._disk_opts(placement.node, volume)
        async with self.slot(placement.node.name):
            await self.run(
                client.volumes.create,
                name=volume,
                driver="local",
                driver_opts=opts,
                labels=dc.volume_labels(spec, prefix=self.prefix),
            )
            try:
                return await self.run(client.containers.create, **config)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: a concurrent create won; use that one
                    raise
        return await self.run(client.containers.get, config["name"])

    async def _disk_opts(self, node: Node, volume: str) -> dict[str, str] | None:
        """A size-limited file system for ``volume`` when it can be had (disk.py), else None."""
        if self.disks_dir is None or disk.why_not(node.url, self.cfg.workspace_mb):
            return None
        try:
            return await asyncio.to_thread(disk.prepare, self.disks_dir, volume, self.cfg.workspace_mb)
        except OSError as exc:  # no free loop device, ...: a plain volume, and the operator is told
            log.warning("workspace %s has no size limit: %s", volume, exc)
            return None

    async def drop_disk(self, volume: str) -> None:
        """After ``volume`` is removed: detach and delete its image, if it had one."""
        if self.disks_dir is None:
            return
        try:
            await asyncio.to_thread(disk.release, self.disks_dir, volume)
        except OSError as exc:
            log.warning("could not release the image of %s: %s", volume, exc)

    async def _reattach_workspace(self, client: docker.DockerClient, container: Any) -> None:
        """A size-limited workspace whose loop device is gone (host reboot) is attached again to
        the device its volume names, before the container starts (disk.py)."""
        if self.disks_dir is None:
            return
        for mount in container.attrs.get("Mounts") or []:
            name = mount.get("Name") or ""
            if mount.get("Type") != "volume" or not disk.image_path(self.disks_dir, name).exists():
                continue
            volume = await self.run(client.volumes.get, name)
            device = ((volume.attrs or {}).get("Options") or {}).get("device", "")
            if not device:
                continue
            try:
                if await asyncio.to_thread(disk.reattach, self.disks_dir, name, device):
                    log.info("workspace %s attached again to %s", name, device)
            except OSError as exc:
                raise ProvisionError(
                    "Your workspace's disk could not be attached again. Ask the instructor "
                    "(the files are safe in the workspace image).",
                    reason="disk",
                    log=str(exc),
                ) from exc

    async def bring_up(
        self, container: Any, node: str, labs: Sequence[LabSeed], say: ProgressCallback = _quiet
    ) -> Any:
        """Start ``container`` if it is not running, wait until it answers, seed the labs whose
        folder is missing; returns the container (reloaded)."""
        client = self.client(node)
        if container.status != "running":
            await self._reattach_workspace(client, container)
            await say("starting", "Starting your container")
            async with self.slot(node):
                await self.run(container.start)
            self.book.set_active(container.id, True)
        await self._wait_ready(client, container.id)
        await self.run(container.reload)
        await self._seed(client, container.id, labs, say)
        return container

    async def _wait_ready(self, client: docker.DockerClient, cid: str) -> None:
        async def probe() -> None:
            result = await self.run(self.exec_blocking, client, cid, ["true"], 10.0, "", {})
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
        listing = await self.run(self.exec_blocking, client, cid, ["ls", "-A", dc.WORKSPACE], 20.0, "", {})
        present = set(listing.stdout.decode(errors="replace").split())
        missing = [lab for lab in labs if lab.lab_id not in present]
        if missing:
            await say("seeding", "Copying the lab files into your workspace")
        for lab in missing:
            ok = await self.run(
                client.api.put_archive, cid, dc.WORKSPACE, files.seed_tar(lab.lab_id, lab.starter)
            )
            if not ok:
                raise ProvisionError("Could not copy the lab files into your workspace.", reason="seed")
