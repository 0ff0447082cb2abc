"""The Docker backend's warm pool: per event, ``size`` ready containers made from a template spec
(the event's image, the largest CPU / memory its labs ask for, their starter folders already seeded).

``DockerBackend.create`` asks :meth:`WarmPool.claim` first: a matching warm container is renamed to
the attendee's deterministic name (``<prefix>-<env id>``; Docker renames atomically, so two claims
never get the same container) and the pool is refilled in the background.

A crowd is served first: the pool keeps its ready containers in memory (read from the engine once,
then maintained by fill and claim), so a claim lists nothing and never waits for a refill; claims
take containers from that list without awaiting in between, so thirty claims at once take thirty
different containers. One refill per event runs at a time and starts only once no claim has come
for :attr:`WarmPool.quiet_s` seconds, so refilling does not compete with the room for the engine. Container labels cannot
change, so a claimed warm container keeps ``labserver.role=warm``; its environment id is read back
from its name (``discover`` does this).

Warm containers are made by the same path as an attendee's (:meth:`Engines.provision`, role
``warm``): the same placement with its reservations, the same volume labels, the same handling of a
concurrent create. The pool uses only the public API of :class:`~.engines.Engines` and knows
nothing of ``DockerBackend``.

Idle culling is not here: it is backend-neutral (:mod:`labserver.services.provisioning.culling`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import docker.errors

from labserver.backends.base import EnvSpec, ProgressCallback
from labserver.backends.docker import config as dc
from labserver.backends.docker.engines import Engines

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
    def __init__(self, engines: Engines) -> None:
        self.engines = engines
        self.targets: dict[int, WarmTarget] = {}
        #: False until the pool is first configured: a backend that never warms anything does not
        #: list containers at every create
        self.active = False
        self._lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._refills: set[asyncio.Task[Any]] = set()
        #: per event, ready unclaimed containers (None until read from the engine)
        self._ready: dict[int, list[tuple[Any, str]]] = {}
        self._refilling: dict[int, asyncio.Task[Any]] = {}
        self._last_claim: dict[int, float] = {}
        #: a refill waits until no claim came for this long (the room first)
        self.quiet_s = 2.0

    def configure(self, event_id: int, template: EnvSpec, size: int) -> None:
        """Keep ``size`` warm containers for ``event_id`` (0 stops warming it)."""
        self.active = True
        if size <= 0:
            self.targets.pop(event_id, None)
        else:
            self.targets[event_id] = WarmTarget(replace(template, event_id=event_id), size)

    def _prefix(self, event_id: int) -> str:
        return f"{self.engines.prefix}-warm-ev{event_id}-"

    async def unclaimed(self, event_id: int) -> list[tuple[Any, str]]:
        """Warm containers of the event that nobody has claimed yet, with their node."""
        found = await self.engines.list(f"{dc.LABEL_INSTANCE}={self.engines.prefix}")
        return [
            (c, node)
            for c, node in found
            if c.labels.get(dc.LABEL_ROLE) == "warm" and c.name.startswith(self._prefix(event_id))
        ]

    async def _ready_list(self, event_id: int) -> list[tuple[Any, str]]:
        """The event's ready containers, read from the engine the first time (server start)."""
        if event_id not in self._ready:
            async with self._read_lock:  # a crowd's first claims read the engine once, not each
                if event_id not in self._ready:
                    found = [(c, n) for c, n in await self.unclaimed(event_id) if c.status == "running"]
                    self._ready[event_id] = found
        return self._ready[event_id]

    def ready_count(self, event_id: int) -> int:
        """Ready unclaimed containers of the event as the pool knows them (no engine call)."""
        return len(self._ready.get(event_id) or [])

    async def fill(self, event_id: int) -> int:
        """Create warm containers until the target is met; returns how many were made. Up to
        ``ENGINE_CONCURRENCY`` at once (the engine's slots bound them); each one is offered to
        claims as soon as it is ready."""
        target = self.targets.get(event_id)
        if target is None:
            return 0
        async with self._lock:
            ready = await self._ready_list(event_id)
            missing = target.size - len(ready)
            if missing <= 0:
                return 0
            results = await asyncio.gather(
                *(self._make_one(event_id, target.template) for _ in range(missing)), return_exceptions=True
            )
        for exc in results:
            if isinstance(exc, BaseException):
                log.warning("warm pool for event %s: %s", event_id, exc)
        return sum(1 for r in results if not isinstance(r, BaseException))

    async def _make_one(self, event_id: int, template: EnvSpec) -> None:
        prefix = self.engines.prefix
        serial = secrets.token_hex(4)
        spec = replace(template, env_id=f"warm-ev{template.event_id}-{serial}", attendee_id=0)
        made = await self.engines.provision(
            spec,
            role="warm",
            name=dc.warm_name(template.event_id, serial, prefix),
            volume=f"{prefix}-ws-warm-ev{template.event_id}-{serial}",
        )
        if event_id in self.targets:
            self._ready.setdefault(event_id, []).append(made)

    async def claim(self, spec: EnvSpec, say: ProgressCallback) -> tuple[Any, str] | None:
        """Give a warm container of ``spec``'s event to ``spec.env_id`` (renamed); None if none fits
        (or the pool was never configured)."""
        if not self.active:
            return None
        image = dc.image_for(spec, self.engines.cfg)
        new_name = dc.container_name(spec.env_id, self.engines.prefix)
        ready = await self._ready_list(spec.event_id)
        self._last_claim[spec.event_id] = time.monotonic()
        while True:
            # taken from the list with no await in between: concurrent claims never pick the same one
            index = next((i for i, (c, _n) in enumerate(ready) if _compatible(c.labels, spec, image)), None)
            if index is None:
                break
            container, node = ready.pop(index)
            try:
                await self.engines.run(self.engines.client(node).api.rename, container.name, new_name)
            except docker.errors.NotFound:
                continue  # removed meanwhile (drained, by hand)
            except docker.errors.APIError:
                continue  # claimed by another server a moment ago, or the name is taken
            await say("claimed", "A ready environment was waiting for you")
            await self.engines.run(container.reload)
            self._refill_soon(spec.event_id)
            return container, node
        self._refill_soon(spec.event_id)
        return None

    def _refill_soon(self, event_id: int) -> None:
        """One refill per event, started once claims have paused for ``quiet_s``."""
        if event_id not in self.targets or event_id in self._refilling:
            return

        async def refill() -> None:
            try:
                while (wait := self._last_claim.get(event_id, 0) + self.quiet_s - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                await self.fill(event_id)
            finally:
                self._refilling.pop(event_id, None)

        task = asyncio.get_running_loop().create_task(refill())
        self._refilling[event_id] = task
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def settle(self) -> None:
        """Wait for background refills (tests, shutdown)."""
        while self._refills:
            await asyncio.gather(*list(self._refills), return_exceptions=True)

    async def drain(self, event_id: int) -> int:
        """Remove the event's unclaimed warm containers and their volumes (event closed)."""
        self.targets.pop(event_id, None)
        self._ready.pop(event_id, None)
        removed = 0
        for container, node in await self.unclaimed(event_id):
            client = self.engines.client(node)
            volumes = [m["Name"] for m in container.attrs.get("Mounts", []) if m.get("Name")]
            with contextlib.suppress(docker.errors.NotFound):
                await self.engines.run(container.remove, force=True)
            self.engines.forget(container.id)
            for v in volumes:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    await self.engines.run(client.api.remove_volume, v)
                    await self.engines.drop_disk(v)
            removed += 1
        return removed
