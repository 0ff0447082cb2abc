"""Placement on real engines: two Docker engines, simulated Ascend cards, an engine that stops."""

from __future__ import annotations

import asyncio
from typing import Any

import docker
import pytest

from labserver.backends.base import EnvState, ProvisionError
from labserver.backends.docker.backend import DockerBackend
from labserver.backends.docker.scheduler import FALLBACK_NOTICE, Node
from tests.backends.docker import engine2 as e2

pytestmark = pytest.mark.docker

LOCAL = "unix:///var/run/docker.sock"


def backend_for(settings: Any, make_spec: Any, nodes: list[Node]) -> DockerBackend:
    return DockerBackend(settings, nodes=nodes)


def test_placement_spreads_over_two_real_engines(docker_settings: Any, make_spec: Any, engine2: str) -> None:
    tag = f"r{make_spec.run}"
    nodes = [
        Node(f"one-{tag}", LOCAL, cpus=1, memory_mb=1024, cpu_overcommit=1, memory_overcommit=1),
        Node(f"two-{tag}", engine2, cpus=1, memory_mb=1024, cpu_overcommit=1, memory_overcommit=1),
    ]
    backend = DockerBackend(docker_settings, nodes=nodes)
    other = docker.DockerClient(base_url=engine2, version="auto")

    async def go() -> None:
        refs = [await backend.create(make_spec(cpus=0.5, memory_mb=512)) for _ in range(4)]
        assert sorted(r.node for r in refs) == sorted([f"one-{tag}"] * 2 + [f"two-{tag}"] * 2)
        with pytest.raises(ProvisionError) as exc:
            await backend.create(make_spec(cpus=0.5, memory_mb=512))
        assert exc.value.reason == "no-room" and "full" in exc.value.message
        for ref in refs:
            res = await backend.exec(ref, ["cat", "lab1/solution.py"])
            assert b"return 41" in res.stdout
        remote = [r for r in refs if r.node == f"two-{tag}"]
        assert {c.name for c in other.containers.list() if make_spec.run in c.name} == {
            r.data["container"] for r in remote
        }
        term = await backend.terminal(remote[0], 80, 24)
        await term.write(b"hostname; echo on-$((40+2))\n")
        buf = b""
        while b"on-42" not in buf:
            buf += await asyncio.wait_for(term.read(), 20)
        await term.close()
        # a restarted server finds each environment on its own node
        again = DockerBackend(docker_settings, nodes=nodes)
        found = {r.env_id: r.node for r in await again.discover() if make_spec.run in r.env_id}
        assert found == {r.env_id: r.node for r in refs}
        for ref in refs:
            await again.destroy(ref)
        await again.aclose()
        await backend.aclose()

    try:
        asyncio.run(go())
    finally:
        for c in other.containers.list(all=True):
            if make_spec.run in c.name:
                c.remove(force=True)


def test_simulated_cards_exhaust_then_fall_back_to_cpu(docker_settings: Any, make_spec: Any) -> None:
    sim = Node(f"sim-{make_spec.run}", LOCAL, kind="npu-simulated", cpus=64, memory_mb=65536, cards=(0, 1))
    cpu = Node(f"cpu-{make_spec.run}", LOCAL, kind="cpu", cpus=64, memory_mb=65536)
    nodes = [sim, cpu]
    backend = DockerBackend(docker_settings, nodes=nodes)
    notices: list[str] = []

    async def progress(phase: str, message: str) -> None:
        if phase == "notice":
            notices.append(message)

    async def go() -> None:
        a = await backend.create(make_spec(device="npu"))
        b = await backend.create(make_spec(device="any"))
        assert {a.data["card"], b.data["card"]} == {0, 1}
        assert a.node == b.node == sim.name and a.device == "cpu-emu"
        env = (
            await backend.exec(a, ["sh", "-c", "echo $LABSERVER_CARD $LAB_DEVICE; ls /dev"])
        ).stdout.decode()
        assert env.startswith(f"{a.data['card']} cpu-emu") and "davinci" not in env
        # cards are gone: an "any" lab falls back to CPU and says so, an "npu" lab is refused
        c = await backend.create(make_spec(device="any"), progress)
        assert c.data["card"] is None and c.node == cpu.name
        assert notices == [FALLBACK_NOTICE]
        assert (await backend.status(c)).message == FALLBACK_NOTICE
        with pytest.raises(ProvisionError) as exc:
            await backend.create(make_spec(device="npu"))
        assert exc.value.reason == "no-card"
        # a restarted server reads the taken cards back from the labels
        restarted = DockerBackend(docker_settings, nodes=nodes)
        with pytest.raises(ProvisionError):
            await restarted.create(make_spec(device="npu"))
        await restarted.destroy(a)
        d = await restarted.create(make_spec(device="npu"))
        assert d.data["card"] == a.data["card"]
        await restarted.aclose()

    asyncio.run(go())


def test_engine_that_stops_mid_event_fails_cleanly_and_recovers(
    docker_settings: Any, make_spec: Any, engine2: str
) -> None:
    node = Node(f"flaky-{make_spec.run}", engine2, cpus=8, memory_mb=8192)
    backend = DockerBackend(docker_settings, nodes=[node])
    other = docker.DockerClient(base_url=engine2, version="auto")

    async def go() -> None:
        ref = await backend.create(make_spec())
        await backend.write_file(ref, "lab1/kept.txt", b"kept")
        e2.stop()
        try:
            status = await asyncio.wait_for(backend.status(ref), 30)
            assert status.state == EnvState.failed and "does not answer" in status.message
            with pytest.raises(ProvisionError) as exc:
                await asyncio.wait_for(backend.create(make_spec()), 60)
            assert exc.value.reason in ("engine-down", "no-nodes", "no-room")
        finally:
            e2.start()

        async def ready() -> None:
            assert (await backend.status(ref)).state == EnvState.ready

        from labserver.backends.base import backoff

        await backoff(ready, attempts=12, first=0.25, factor=1.5, retry_on=(AssertionError,))
        assert await backend.read_file(ref, "lab1/kept.txt") == b"kept"
        again = await backend.create(make_spec(env_id=ref.env_id))
        assert again.infra_id == ref.infra_id
        await backend.destroy(ref)
        await backend.aclose()

    try:
        asyncio.run(go())
    finally:
        for c in other.containers.list(all=True):
            if make_spec.run in c.name:
                c.remove(force=True)
