"""Warm pool and idle culling for the Docker backend.

Warm pool
---------
Per event, keep ``size`` ready containers made from a template spec (the event's image, the largest
CPU / memory its labs ask for, their starter folders already seeded). When an attendee joins,
``DockerBackend.create`` asks :meth:`WarmPool.claim` first: a matching warm container is renamed to
the attendee's deterministic name (``<prefix>-<env id>``; Docker renames atomically, so two claims
never get the same container) and the pool is refilled in the background. Container labels cannot
change, so a claimed warm container keeps ``labserver.role=warm``; its environment id is read back
from its name (``discover`` does this).

Idle culling
------------
:func:`select_idle` is the policy: pure, driven by the one clock (``labserver.clock``), tested by
moving a :class:`~labserver.clock.TestClock`. :func:`cull` stops (not destroys) what the policy
selects; the workspace volume stays and ``create`` starts the container again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import docker.errors

from labserver import clock
from labserver.backends.base import EnvRef, EnvSpec, ProgressCallback, ProvisionError
from labserver.backends.docker import config as dc
from labserver.backends.docker.scheduler import NoRoom, place

if TYPE_CHECKING:
    from labserver.backends.docker.backend import DockerBackend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmTarget:
    template: EnvSpec  # env_id / attendee_id are ignored
    size: int


def _compatible(labels: Mapping[str, str], spec: EnvSpec, image: str) -> bool:
    return (
        labels.get("labserver.image") == image
        and labels.get("labserver.network") == ("1" if spec.network else "0")
        and float(labels.get("labserver.cpus", 0)) >= spec.cpus
        and int(labels.get("labserver.memory_mb", 0)) >= spec.memory_mb
        and (spec.device != "npu" or "labserver.card" in labels)
        and (spec.device != "cpu" or "labserver.card" not in labels)
    )


class WarmPool:
    def __init__(self, backend: DockerBackend) -> None:
        self.backend = backend
        backend.warm_pool = self
        self.targets: dict[int, WarmTarget] = {}
        self._lock = asyncio.Lock()
        self._refills: set[asyncio.Task[Any]] = set()

    def configure(self, event_id: int, template: EnvSpec, size: int) -> None:
        """Keep ``size`` warm containers for ``event_id`` (0 stops warming it)."""
        if size <= 0:
            self.targets.pop(event_id, None)
        else:
            self.targets[event_id] = WarmTarget(replace(template, event_id=event_id), size)

    def _prefix(self, event_id: int) -> str:
        return f"{self.backend.prefix}-warm-ev{event_id}-"

    async def unclaimed(self, event_id: int) -> list[tuple[Any, str]]:
        """Warm containers of the event that nobody has claimed yet, with their node."""
        found = await self.backend._list(f"{dc.LABEL_INSTANCE}={self.backend.prefix}")
        return [
            (c, node)
            for c, node in found
            if c.labels.get(dc.LABEL_ROLE) == "warm" and c.name.startswith(self._prefix(event_id))
        ]

    async def fill(self, event_id: int) -> int:
        """Create warm containers until the target is met; returns how many were made."""
        target = self.targets.get(event_id)
        if target is None:
            return 0
        made = 0
        async with self._lock:
            have = len([c for c, _ in await self.unclaimed(event_id) if c.status == "running"])
            for _ in range(target.size - have):
                try:
                    await self._make_one(target.template)
                except (ProvisionError, NoRoom) as exc:
                    log.warning("warm pool for event %s: %s", event_id, exc)
                    break
                made += 1
        return made

    async def _make_one(self, template: EnvSpec) -> None:
        b = self.backend
        serial = secrets.token_hex(4)
        name = dc.warm_name(template.event_id, serial, b.prefix)
        volume = f"{b.prefix}-ws-warm-ev{template.event_id}-{serial}"
        spec = replace(template, env_id=f"warm-ev{template.event_id}-{serial}", attendee_id=0)
        async with b._place_lock:
            try:
                placement = place(
                    await b.nodes(),
                    await b.usage(),
                    device=spec.device,
                    cpus=spec.cpus,
                    memory_mb=spec.memory_mb,
                )
            except NoRoom as exc:
                raise ProvisionError(exc.message, reason=exc.reason) from exc
            client = b.client(placement.node.name)
            config = dc.make_container_config(
                spec, b.cfg, placement, name=name, volume=volume, role="warm", prefix=b.prefix
            )
            await b._run(
                client.volumes.create,
                name=volume,
                labels={dc.LABEL_ENV: spec.env_id, dc.LABEL_INSTANCE: b.prefix},
            )
            container = await b._run(client.containers.create, **config)
        await b._run(container.start)
        await b._wait_ready(client, container.id)

        async def quiet(phase: str, message: str) -> None:
            pass

        await b._seed(client, container.id, spec.labs, quiet)

    async def claim(
        self, backend: DockerBackend, spec: EnvSpec, say: ProgressCallback
    ) -> tuple[Any, str] | None:
        """Give a warm container of ``spec``'s event to ``spec.env_id`` (renamed); None if none fits."""
        image = dc.image_for(spec, backend.cfg)
        new_name = dc.container_name(spec.env_id, backend.prefix)
        candidates = await self.unclaimed(spec.event_id)
        random.shuffle(candidates)  # concurrent joins try different containers instead of racing for one
        for container, node in candidates:
            if container.status != "running" or not _compatible(container.labels, spec, image):
                continue
            try:
                await backend._run(backend.client(node).api.rename, container.name, new_name)
            except docker.errors.APIError:
                continue  # claimed by someone else a moment ago, or the name is taken
            await say("claimed", "A ready environment was waiting for you")
            await backend._run(container.reload)
            self._refill_soon(spec.event_id)
            return container, node
        self._refill_soon(spec.event_id)
        return None

    def _refill_soon(self, event_id: int) -> None:
        if event_id not in self.targets:
            return
        task = asyncio.get_running_loop().create_task(self.fill(event_id))
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def settle(self) -> None:
        """Wait for background refills (tests, shutdown)."""
        while self._refills:
            await asyncio.gather(*list(self._refills), return_exceptions=True)

    async def drain(self, event_id: int) -> int:
        """Remove the event's unclaimed warm containers and their volumes (event closed)."""
        self.targets.pop(event_id, None)
        removed = 0
        for container, node in await self.unclaimed(event_id):
            client = self.backend.client(node)
            volumes = [m["Name"] for m in container.attrs.get("Mounts", []) if m.get("Name")]
            with contextlib.suppress(docker.errors.NotFound):
                await self.backend._run(container.remove, force=True)
            for v in volumes:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    await self.backend._run(client.api.remove_volume, v)
            removed += 1
        return removed


# -- idle culling -------------------------------------------------------------------------------
@dataclass(frozen=True)
class IdlePolicy:
    idle_minutes: float  # 0 = never cull
    grace_minutes: float = 5.0  # never cull an environment younger than this


def select_idle(
    last_activity: Mapping[str, dt.datetime],
    now: dt.datetime,
    policy: IdlePolicy,
    created: Mapping[str, dt.datetime] | None = None,
    keep: Iterable[str] = (),
) -> list[str]:
    """Environment ids to stop: no activity for ``idle_minutes`` (and older than the grace period).
    ``keep`` (e.g. environments an instructor is watching) is never selected."""
    if policy.idle_minutes <= 0:
        return []
    keep_set = set(keep)
    idle_for = dt.timedelta(minutes=policy.idle_minutes)
    grace = dt.timedelta(minutes=policy.grace_minutes)
    chosen = []
    for env_id, last in sorted(last_activity.items()):
        if env_id in keep_set:
            continue
        born = (created or {}).get(env_id)
        if born is not None and now - born < grace:
            continue
        if now - last >= idle_for:
            chosen.append(env_id)
    return chosen


async def cull(
    backend: DockerBackend,
    refs: Iterable[EnvRef],
    last_activity: Mapping[str, dt.datetime],
    policy: IdlePolicy,
    keep: Iterable[str] = (),
) -> list[str]:
    """Stop the idle environments among ``refs``; returns their ids. Time comes from ``clock.now()``."""
    by_id = {r.env_id: r for r in refs}
    activity = {k: v for k, v in last_activity.items() if k in by_id}
    chosen = select_idle(activity, clock.now(), policy, keep=keep)
    for env_id in chosen:
        await backend.stop(by_id[env_id])
    return chosen
