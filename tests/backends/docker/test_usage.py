"""Placement usage kept in memory (``usage.py``) and the per-engine bound on create/start calls
(``slots.py``): pure tests, then the real engine."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import docker
import pytest

from labserver.backends.base import ProvisionError
from labserver.backends.docker.backend import DockerBackend
from labserver.backends.docker.scheduler import Node, Running, has_room, place
from labserver.backends.docker.slots import EngineSlots
from labserver.backends.docker.usage import UsageBook, running_from_labels

LOCAL = "unix:///var/run/docker.sock"


def labels(env: str, node: str, cpus: float = 1, mem: int = 1024, card: int | None = None) -> dict[str, str]:
    out = {
        "labserver.role": "env",
        "labserver.env_id": env,
        "labserver.node": node,
        "labserver.cpus": f"{cpus:g}",
        "labserver.memory_mb": str(mem),
    }
    if card is not None:
        out["labserver.card"] = str(card)
    return out


class Engine:
    """What a lister sees on one engine (a dict standing in for the daemon in the pure tests)."""

    def __init__(self) -> None:
        self.containers: dict[str, dict[str, str]] = {}
        self.states: dict[str, str] = {}  # container id -> engine state (default running)
        self.calls = 0
        self.down = False

    async def list(self, engine: str) -> list[tuple[str, Mapping[str, str], str, str]]:
        self.calls += 1
        if self.down:
            raise ConnectionError("engine down")
        return [
            (cid, lab, lab.get("labserver.node", engine), self.states.get(cid, "running"))
            for cid, lab in self.containers.items()
        ]


def test_labels_tell_what_a_container_holds_and_graders_hold_nothing() -> None:
    assert running_from_labels(labels("a", "n", 0.5, 512, 3), "n", "x") == Running("a", "n", 0.5, 512, 3)
    assert running_from_labels({"labserver.role": "grader"}, "n", "x") is None
    assert running_from_labels({}, "n", "x") is None


def test_decisions_read_memory_and_list_the_engine_only_when_due() -> None:
    engine = Engine()
    engine.containers["c1"] = labels("a", "n", card=0)
    now = [0.0]
    book = UsageBook(engine.list, max_age_s=60, now=lambda: now[0])
    node = Node("n", LOCAL, kind="npu-simulated", cpus=4, memory_mb=8192, cards=(0, 1))

    async def go() -> None:
        usage = await book.usage(["n"])  # first use: rebuilt from labels (server start)
        assert engine.calls == 1 and [r.env_id for r in usage.envs] == ["a"]
        for i in range(30):  # a burst: thirty decisions, no listing
            usage = await book.usage(["n"])
            p = place([node], usage, device="any", cpus=0.1, memory_mb=100)
            book.add("n", f"new{i}", Running(f"e{i}", "n", 0.1, 100, p.card))
        assert engine.calls == 1
        usage = await book.usage(["n"])
        assert len(usage.envs) == 31 and usage.cards_taken("n") == {0, 1}
        book.remove("new0")  # destroyed: its card is free again
        assert (await book.usage(["n"])).cards_taken("n") == {0}
        now[0] = 61.0  # too old: re-read (another server may share the engine)
        usage = await book.usage(["n"])
        assert engine.calls == 2 and [r.env_id for r in usage.envs] == ["a"]

    asyncio.run(go())


def test_an_engine_that_fails_is_rebuilt_from_labels_when_it_answers_again() -> None:
    engine = Engine()
    engine.containers["c1"] = labels("a", "n")
    book = UsageBook(engine.list)

    async def go() -> None:
        await book.usage(["n"])
        book.add("n", "c2", Running("b", "n", 1, 1024))
        engine.down = True
        book.mark_stale("n")
        assert {r.env_id for r in (await book.usage(["n"])).envs} == {"a", "b"}  # down: keep what we knew
        engine.down = False
        engine.containers["c3"] = labels("c", "n")  # made while we could not see (c2 is gone)
        assert {r.env_id for r in (await book.usage(["n"])).envs} == {"a", "c"}
        assert book.counts()["n"]["count"] == 2

    asyncio.run(go())


def test_engine_slots_bound_concurrency_and_count_the_waits() -> None:
    slots = EngineSlots(2)
    peak = [0]
    active = [0]

    async def call() -> None:
        async with slots.slot("e"):
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.01)
            active[0] -= 1

    async def go() -> None:
        await asyncio.gather(*(call() for _ in range(30)))

    asyncio.run(go())
    st = slots.stats()["e"]
    assert peak[0] == 2 and st["calls"] == 30 and st["waits"] == 28 and st["in_use"] == 0
    assert st["waiting"] == 0 and st["wait_s_total"] > 0
    with pytest.raises(ValueError):
        EngineSlots(0)


# -- the real engine ----------------------------------------------------------------------------------


@pytest.mark.docker
def test_thirty_placements_at_once_list_the_engine_once_and_stay_within_capacity(
    docker_settings: Any, make_spec: Any, docker_client: docker.DockerClient
) -> None:
    tag = f"u{make_spec.run}"
    # room for exactly 30 at 0.25 CPU / 128 MiB: the 31st is refused, as with the label listing
    node = Node(f"n-{tag}", LOCAL, cpus=7.5, memory_mb=30 * 128, cpu_overcommit=1, memory_overcommit=1)
    settings = docker_settings.model_copy(
        update={"docker": docker_settings.docker.model_copy(update={"engine_concurrency": 3})}
    )
    backend = DockerBackend(settings, nodes=[node], prefix=f"bd{tag}")

    async def go() -> None:
        specs = [make_spec(cpus=0.25, memory_mb=128, labs=()) for _ in range(30)]
        refs = await asyncio.gather(*(backend.create(s) for s in specs))
        assert backend.engines.book.rebuilds == 1  # at the first decision, never again in the burst
        stats = backend.engines.engine_stats()[node.name]
        assert stats["usage"]["count"] == 30 and stats["usage"]["memory_mb"] == 30 * 128
        assert stats["slots"]["limit"] == 3 and stats["slots"]["waits"] > 0
        assert stats["slots"]["in_use"] == 0 and stats["slots"]["waiting"] == 0
        with pytest.raises(ProvisionError) as exc:
            await backend.create(make_spec(cpus=0.25, memory_mb=128, labs=()))
        assert exc.value.reason == "no-room"
        # destroyed = free at once, without a listing
        await backend.destroy(refs[0])
        again = await backend.create(make_spec(cpus=0.25, memory_mb=128, labs=()))
        assert backend.engines.book.rebuilds == 1
        # rebuilt from labels (engine recovery, a restarted server): the same usage
        before = backend.engines.book.counts()[node.name]
        backend.engines.book.mark_stale(node.name)
        await backend.engines.usage()
        assert backend.engines.book.counts()[node.name] == before
        await asyncio.gather(*(backend.destroy(r) for r in [*refs[1:], again]))
        assert backend.engines.book.counts()[node.name]["count"] == 0
        await backend.aclose()

    asyncio.run(go())


def test_a_stopped_container_keeps_its_card_but_frees_cpu_and_memory() -> None:
    """Stop all / idle culling must make room for the queue: a stopped container promises no CPU
    or memory (rebuilt from its state, or marked by the backend), but its card stays taken."""
    node = Node(
        "n",
        LOCAL,
        kind="npu-simulated",
        cpus=1,
        memory_mb=1024,
        cards=(0, 1),
        cpu_overcommit=1,
        memory_overcommit=1,
    )
    engine = Engine()
    engine.containers["c1"] = labels("a", "n", 1, 1024, 0)
    book = UsageBook(engine.list)

    async def go() -> None:
        usage = await book.usage(["n"])
        assert not has_room(node, usage, 1, 1024)
        book.set_active("c1", False)
        usage = await book.usage(["n"])
        assert has_room(node, usage, 1, 1024)
        assert usage.cards_taken("n") == {0}
        assert book.counts()["n"]["stopped"] == 1 and book.counts()["n"]["cpus"] == 0
        book.set_active("c1", True)
        assert not has_room(node, await book.usage(["n"]), 1, 1024)
        # the same from the engine's listing: an exited container is inactive
        engine.states["c1"] = "exited"
        await book.rebuild("n")
        usage = await book.usage(["n"])
        assert has_room(node, usage, 1, 1024) and usage.cards_taken("n") == {0}

    asyncio.run(go())
