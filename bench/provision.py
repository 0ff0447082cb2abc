"""Provisioning figures: join -> usable terminal, a crowd joining at once, check overhead, idle memory.

    .venv/bin/python bench/provision.py [--n 10] [--crowd 30] [--cpus 0.25] [--memory-mb 256]
                                        [--skip-local] [--skip-docker] [--skip-cold]

"Usable terminal" = ``create()`` returned, ``terminal()`` opened and an ``echo`` came back. Docker
runs use a name prefix of their own (``lsbench``) and remove everything they made. Figures depend
on the machine and on what else runs; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from labserver.backends.base import CheckRequest, EnvSpec, LabSeed
from labserver.config import DockerSettings, Settings

TRIVIAL_CHECKER = """
import json, os, sys
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": True, "message": "ok"}).encode())
sys.exit(0)
"""


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def line(label: str, values: list[float]) -> None:
    print(
        f"  {label:<44} median {statistics.median(values):7.3f} s   p95 {pct(values, 95):7.3f} s   (n={len(values)})"
    )


CREATED: list[Any] = []


async def join_to_terminal(backend: Any, spec: EnvSpec) -> float:
    start = time.monotonic()
    ref = await backend.create(spec)
    CREATED.append(ref)
    term = await backend.terminal(ref, 80, 24)
    await term.write(b"echo ready-$((40+2))\n")
    buf = b""
    while b"ready-42" not in buf:
        chunk = await asyncio.wait_for(term.read(), 60)
        if not chunk:
            raise RuntimeError(f"terminal closed: {buf!r}")
        buf += chunk
    elapsed = time.monotonic() - start
    await term.close()
    return elapsed


async def destroy_created(backend: Any) -> None:
    await asyncio.gather(*(backend.destroy(r) for r in CREATED))
    CREATED.clear()


async def check_overhead(backend: Any, spec: EnvSpec, checker: Path, n: int) -> list[float]:
    ref = await backend.create(spec)
    CREATED.append(ref)
    out = []
    for _ in range(n):
        start = time.monotonic()
        raw = await backend.run_check(ref, CheckRequest("lab", "s", checker, {}, timeout_s=60))
        out.append(time.monotonic() - start)
        assert raw.exit_code == 0, raw
    return out


#: limits of every bench environment (``--cpus``, ``--memory-mb``)
LIMITS = {"cpus": 0.25, "memory_mb": 256}


def make_specs(run: str, count: int, starter: Path, image: str, event: int = 1) -> list[EnvSpec]:
    return [
        EnvSpec(
            env_id=f"{run}-{i}",
            event_id=event,
            attendee_id=i,
            labs=(LabSeed("lab", starter),),
            image=image,
            cpus=LIMITS["cpus"],
            memory_mb=int(LIMITS["memory_mb"]),
            pids=128,
        )
        for i in range(count)
    ]


async def bench_backend(
    name: str,
    backend: Any,
    starter: Path,
    checker: Path,
    image: str,
    n: int,
    crowd: int,
    run: str,
    idle_memory: Any = None,
) -> None:
    print(f"\n{name}")
    seq = [await join_to_terminal(backend, s) for s in make_specs(f"{run}s", n, starter, image)]
    line("join -> usable terminal, one at a time", seq)
    await destroy_created(backend)
    t0 = time.monotonic()
    many = await asyncio.gather(
        *(join_to_terminal(backend, s) for s in make_specs(f"{run}c", crowd, starter, image))
    )
    line(f"join -> usable terminal, {crowd} at once", list(many))
    print(f"  {'all ' + str(crowd) + ' usable after':<44} {time.monotonic() - t0:7.3f} s")
    engine_figures(backend)
    if idle_memory is not None:
        await idle_memory()
    await destroy_created(backend)
    line(
        "check round trip (trivial checker)",
        await check_overhead(backend, make_specs(f"{run}k", 1, starter, image)[0], checker, n),
    )


def engine_figures(backend: Any) -> None:
    """Docker: the per-engine slot waits and how often placement listed the engine."""
    engines = getattr(backend, "engines", None)
    if engines is None or not hasattr(engines, "engine_stats"):
        return
    for name, st in engines.engine_stats().items():
        slots = st["slots"]
        if slots:
            print(
                f"  engine {name}: {slots['limit']} create/start at once, {slots['waits']} of {slots['calls']}"
                f" calls waited, {slots['wait_s_total']:.1f} s in total, longest {slots['wait_s_max']:.2f} s"
            )
    print(f"  placement listed the engine {engines.book.rebuilds} time(s) so far")


async def idle_memory_docker(backend: Any, prefix: str) -> None:
    import docker

    client = docker.from_env(version="auto")
    await asyncio.sleep(5)
    usages = []
    for c in client.containers.list(filters={"label": f"labserver.instance={prefix}"}):
        stats = c.stats(stream=False)
        mem = stats.get("memory_stats", {})
        used = mem.get("usage", 0) - mem.get("stats", {}).get("cache", 0)
        usages.append(used / 2**20)
    if usages:
        print(
            f"  {'idle memory per environment (rss, no cache)':<44} median {statistics.median(usages):7.1f} MiB"
            f"   max {max(usages):7.1f} MiB   (n={len(usages)})"
        )


async def bench_warm(backend: Any, starter: Path, image: str, n: int, crowd: int, run: str) -> None:
    print("\ndocker, warm pool")
    pool = backend.warm_pool
    event = 4242
    template = make_specs(f"{run}w", 1, starter, image, event)[0]
    for label, count in (("one at a time", n), (f"{crowd} at once", crowd)):
        pool.configure(event, template, count)
        t0 = time.monotonic()
        await pool.fill(event)
        print(f"  {'fill pool of ' + str(count):<44} {time.monotonic() - t0:7.3f} s")
        pool.configure(event, template, 0)  # no refills while measuring
        specs = make_specs(f"{run}w{count}", count, starter, image, event)
        if label == "one at a time":
            times = [await join_to_terminal(backend, s) for s in specs]
        else:
            times = list(await asyncio.gather(*(join_to_terminal(backend, s) for s in specs)))
        line(f"join -> usable terminal, {label}", times)
        engine_figures(backend)
        await destroy_created(backend)
    await pool.drain(event)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--crowd", type=int, default=30)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--skip-cold", action="store_true", help="docker: only the warm pool")
    parser.add_argument("--cpus", type=float, default=0.25, help="CPU limit of each environment")
    parser.add_argument("--memory-mb", type=int, default=256, help="memory limit of each environment")
    parser.add_argument(
        "--engine-concurrency", type=int, default=0, help="docker: create/start at once (0: setting)"
    )
    args = parser.parse_args()
    LIMITS.update(cpus=args.cpus, memory_mb=args.memory_mb)
    print(f"limits per environment: {args.cpus:g} CPU, {args.memory_mb} MiB")
    run = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        starter = root / "starter"
        starter.mkdir()
        (starter / "main.py").write_text("print('hello')\n")
        checker = root / "check.py"
        checker.write_text(TRIVIAL_CHECKER)
        if not args.skip_local:
            from labserver.backends.local import LocalBackend

            local = LocalBackend(Settings(data_dir=root / "local"))
            await bench_backend("local", local, starter, checker, "", args.n, args.crowd, run)
            print("  idle memory per environment: no process runs while a local environment is idle")
        if not args.skip_docker:
            from labserver.backends.docker import images
            from labserver.backends.docker.backend import DockerBackend

            image = images.build_cpu_emu().tag
            prefix = f"lsbench{run}"
            docker_cfg = DockerSettings(image=image)
            if args.engine_concurrency:
                docker_cfg = DockerSettings(image=image, engine_concurrency=args.engine_concurrency)
            print(f"engine concurrency: {docker_cfg.engine_concurrency}")
            settings = Settings(data_dir=root / "docker", docker=docker_cfg)
            import os

            from labserver.backends.docker.scheduler import Node

            node = Node(
                "bench",
                "unix:///var/run/docker.sock",
                cpus=os.cpu_count() or 2,
                memory_mb=1_000_000,  # speed, not admission: every limit fits (other servers' too)
                cpu_overcommit=1000,
            )
            backend = DockerBackend(settings, prefix=prefix, nodes=[node])
            try:
                if not args.skip_cold:
                    await bench_backend(
                        "docker, cold",
                        backend,
                        starter,
                        checker,
                        image,
                        args.n,
                        args.crowd,
                        run,
                        idle_memory=lambda: idle_memory_docker(backend, prefix),
                    )
                await bench_warm(backend, starter, image, args.n, args.crowd, run)
            finally:
                for ref in await backend.discover():
                    await backend.destroy(ref)
                await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
