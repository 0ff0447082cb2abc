"""The Docker backend against a real engine: lifecycle, hardening, files, terminal, re-adoption."""

from __future__ import annotations

import asyncio
from typing import Any

import docker
import pytest

from labserver.backends.base import EnvironmentGone, EnvState, PathRefused
from labserver.backends.docker.backend import DockerBackend

pytestmark = pytest.mark.docker


async def read_until(term: Any, needle: bytes, timeout: float = 20.0) -> bytes:
    buf = b""

    async def loop() -> bytes:
        nonlocal buf
        while needle not in buf:
            chunk = await term.read()
            if not chunk:
                raise AssertionError(f"terminal closed before {needle!r}; got {buf[-300:]!r}")
            buf += chunk
        return buf

    return await asyncio.wait_for(loop(), timeout)


def test_create_is_idempotent_labelled_and_seeded(
    docker_backend: DockerBackend, make_spec: Any, docker_client: docker.DockerClient
) -> None:
    spec = make_spec()
    phases: list[str] = []

    async def progress(phase: str, message: str) -> None:
        phases.append(phase)

    async def go() -> None:
        ref = await docker_backend.create(spec, progress)
        again = await docker_backend.create(spec)
        assert again.infra_id == ref.infra_id
        assert (await docker_backend.status(ref)).state == EnvState.ready
        assert await docker_backend.read_file(ref, "lab1/solution.py") == b"def answer():\n    return 41\n"
        # a second create never touches an existing lab folder
        await docker_backend.write_file(ref, "lab1/solution.py", b"changed\n")
        await docker_backend.create(spec)
        assert await docker_backend.read_file(ref, "lab1/solution.py") == b"changed\n"

    asyncio.run(go())
    assert phases[0] == "placing" and {"creating", "starting", "seeding"} <= set(phases)
    assert phases[-1] == "ready"
    container = docker_client.containers.get(f"labserver-{spec.env_id}")
    labels = container.labels
    assert labels["labserver.env_id"] == spec.env_id
    assert labels["labserver.event"] == "9000" and labels["labserver.attendee"] == str(spec.attendee_id)
    assert "labserver.version" in labels
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert mounts["/workspace"]["Name"] == f"labserver-ws-{spec.env_id}"


def test_container_is_hardened_for_real(docker_backend: DockerBackend, make_spec: Any) -> None:
    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        script = (
            "id -u; id -g; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status;"
            "touch /etc/x 2>/dev/null && echo rootfs-writable || echo rootfs-ro;"
            "touch /tmp/x && echo tmp-ok; touch ~/x && echo home-ok; touch /workspace/x && echo ws-ok;"
            "cat /sys/fs/cgroup/pids/pids.max; cat /sys/fs/cgroup/memory/memory.limit_in_bytes;"
            "python -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' 2>/dev/null"
            " && echo net || echo no-net; ls /sys/class/net"
        )
        out = (await docker_backend.exec(ref, ["sh", "-c", script])).stdout.decode().split()
        assert out[:2] == ["1000", "1000"]
        assert out[2:4] == ["CapEff:", "0000000000000000"]
        assert out[4:6] == ["NoNewPrivs:", "1"]
        assert out[6:10] == ["rootfs-ro", "tmp-ok", "home-ok", "ws-ok"]
        assert out[10] == "128" and int(out[11]) == 512 * 2**20
        assert out[12] == "no-net" and out[13:] == ["lo"]

    asyncio.run(go())


def test_exec_timeout_and_env(docker_backend: DockerBackend, make_spec: Any) -> None:
    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        r = await docker_backend.exec(ref, ["sleep", "30"], timeout=1)
        assert r.timed_out and r.exit_code is None
        r = await docker_backend.exec(
            ref, ["sh", "-c", "echo $FOO; pwd; echo err >&2; exit 3"], cwd="lab1", env={"FOO": "bar"}
        )
        assert r.exit_code == 3 and r.stdout == b"bar\n/workspace/lab1\n" and r.stderr == b"err\n"
        r = await docker_backend.exec(ref, ["sh", "-c", "touch x"], cwd="lab1", readonly=True)
        assert r.exit_code != 0 and b"Read-only" in r.stderr
        r = await docker_backend.exec(ref, ["cat", "solution.py"], cwd="lab1", readonly=True)
        assert r.exit_code == 0 and b"return 41" in r.stdout

    asyncio.run(go())


def test_files_stay_inside_the_workspace(docker_backend: DockerBackend, make_spec: Any) -> None:
    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        await docker_backend.write_file(ref, "lab1/deep/er/new.bin", bytes(range(256)) * 100)
        assert await docker_backend.read_file(ref, "lab1/deep/er/new.bin") == bytes(range(256)) * 100
        paths = {e.path: e for e in await docker_backend.list_files(ref, "lab1")}
        assert paths["lab1/deep/er/new.bin"].size == 25600 and paths["lab1/deep"].is_dir
        assert "lab1/data/notes.txt" in paths
        await docker_backend.exec(ref, ["ln", "-s", "/etc", "lab1/etc-link"])
        await docker_backend.exec(ref, ["ln", "-s", "/etc/passwd", "lab1/pw"])
        for bad in ("../x", "/etc/passwd", "lab1/../../etc/passwd", "lab1/etc-link/passwd", "lab1/pw"):
            with pytest.raises(PathRefused):
                await docker_backend.read_file(ref, bad)
        for bad in ("lab1/etc-link/new", "/tmp/x", "../x"):
            with pytest.raises(PathRefused):
                await docker_backend.write_file(ref, bad, b"x")
        with pytest.raises(FileNotFoundError):
            await docker_backend.read_file(ref, "lab1/nope.txt")
        with pytest.raises(IsADirectoryError):
            await docker_backend.read_file(ref, "lab1/data")
        backup = await docker_backend.reset_lab(ref, make_spec().labs[0], "reset-1")
        assert backup == ".backups/reset-1/lab1"
        assert not any(e.path.startswith(".backups") for e in await docker_backend.list_files(ref, ""))
        with pytest.raises(FileNotFoundError):
            await docker_backend.read_file(ref, "lab1/deep/er/new.bin")
        assert await docker_backend.read_file(ref, ".backups/reset-1/lab1/deep/er/new.bin")
        import io
        import zipfile

        names = zipfile.ZipFile(io.BytesIO(await docker_backend.archive(ref, "lab1"))).namelist()
        assert sorted(names) == ["lab1/data/notes.txt", "lab1/solution.py"]

    asyncio.run(go())


def test_terminal_resize_ctrl_c_and_reconnect(docker_backend: DockerBackend, make_spec: Any) -> None:
    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        term = await docker_backend.terminal(ref, 80, 24, cwd="lab1")
        await term.write(b"pwd; stty size\n")
        out = await read_until(term, b"24 80")
        assert b"/workspace/lab1" in out
        await term.resize(120, 40)
        await term.write(b"stty size\n")
        await read_until(term, b"40 120")
        await term.write(b"sleep 100\n")
        await asyncio.sleep(0.3)
        await term.write(b"\x03echo after-$((6*7))\n")
        await read_until(term, b"after-42")
        await term.write(b"sleep 1000 &\n")
        await asyncio.sleep(0.3)
        await term.close()
        while await asyncio.wait_for(term.read(), 5):  # queued output, then b"" for good
            pass
        assert await term.read() == b""
        ps = await docker_backend.exec(ref, ["ps", "-eo", "args"])
        assert b"sleep 1000" not in ps.stdout, "closing a terminal hangs up its jobs"
        again = await docker_backend.terminal(ref, 80, 24)
        await again.write(b"exit\n")
        while await asyncio.wait_for(again.read(), 10):
            pass
        await again.close()

    asyncio.run(go())


def test_restart_readopts_containers_terminal_and_files(
    docker_settings: Any, make_spec: Any, docker_client: docker.DockerClient
) -> None:
    spec = make_spec()
    first = DockerBackend(docker_settings)

    async def before() -> None:
        ref = await first.create(spec)
        await first.write_file(ref, "lab1/kept.txt", b"still here")
        await first.aclose()

    async def after() -> None:
        second = DockerBackend(docker_settings)  # a restarted server: no memory of the first
        refs = [r for r in await second.discover() if r.env_id == spec.env_id]
        assert len(refs) == 1
        ref = refs[0]
        assert (await second.status(ref)).state == EnvState.ready
        assert await second.read_file(ref, "lab1/kept.txt") == b"still here"
        term = await second.terminal(ref, 80, 24)
        await term.write(b"cat lab1/kept.txt\n")
        await read_until(term, b"still here")
        await term.close()
        await second.destroy(ref)
        await second.destroy(ref)  # already gone: success
        assert (await second.status(ref)).state == EnvState.stopped
        with pytest.raises(EnvironmentGone):
            await second.exec(ref, ["true"])
        assert not [r for r in await second.discover() if r.env_id == spec.env_id]
        await second.aclose()

    try:
        asyncio.run(before())
        asyncio.run(after())
    finally:
        from tests.backends.docker.conftest import cleanup

        cleanup(docker_client, make_spec.run)
    assert not docker_client.volumes.list(filters={"name": f"labserver-ws-{spec.env_id}"})


def test_stopped_container_is_started_again_by_create(docker_backend: DockerBackend, make_spec: Any) -> None:
    spec = make_spec()

    async def go() -> None:
        ref = await docker_backend.create(spec)
        await docker_backend.write_file(ref, "lab1/kept.txt", b"1")
        await docker_backend.stop(ref)
        assert (await docker_backend.status(ref)).state == EnvState.stopped
        with pytest.raises(EnvironmentGone):
            await docker_backend.exec(ref, ["true"])
        ref2 = await docker_backend.create(spec)
        assert ref2.infra_id == ref.infra_id
        assert await docker_backend.read_file(ref2, "lab1/kept.txt") == b"1"

    asyncio.run(go())


def test_missing_image_is_a_clear_provision_error(docker_backend: DockerBackend, make_spec: Any) -> None:
    from labserver.backends.base import ProvisionError

    async def go() -> None:
        with pytest.raises(ProvisionError) as exc:
            await docker_backend.create(make_spec(image="labserver/no-such-image:1"))
        assert exc.value.reason == "image-missing"
        assert "labserver images build" in exc.value.message

    asyncio.run(go())


def test_prepare_event_fills_the_warm_pool_from_settings(
    docker_backend: DockerBackend, make_spec: Any
) -> None:
    async def go() -> None:
        event = 7000 + int(make_spec.run[:3], 16)
        template = make_spec(event_id=event)
        assert await docker_backend.prepare_event(event, template, size=1) == 1
        assert await docker_backend.prepare_event(event, template, size=1) == 0
        phases: list[str] = []

        async def progress(phase: str, message: str) -> None:
            phases.append(phase)

        ref = await docker_backend.create(make_spec(event_id=event), progress)
        assert "claimed" in phases
        assert docker_backend.warm_pool is not None
        await docker_backend.warm_pool.settle()
        assert await docker_backend.prepare_event(event, template, size=0) == 0  # drains the refill
        assert await docker_backend.warm_pool.unclaimed(event) == []
        await docker_backend.destroy(ref)

    asyncio.run(go())


def test_shells_of_a_dead_server_are_hung_up_by_the_next_one(
    docker_backend: DockerBackend, make_spec: Any
) -> None:
    from labserver.backends.docker import terminal as docker_terminal

    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        old = await docker_backend.terminal(ref, 80, 24)
        await old.write(b"echo $$ > /tmp/old-shell; echo marked-$((1+1))\n")
        await read_until(old, b"marked-2")
        # the server dies without closing (kill -9): its shell stays; a new server process starts
        previous = docker_terminal.INSTANCE
        docker_terminal.INSTANCE = "newserver"
        try:
            new = await docker_backend.terminal(ref, 80, 24)
            await new.write(b"echo STATE=$(kill -0 $(cat /tmp/old-shell) 2>/dev/null && echo A || echo G)x\n")
            out = await read_until(new, b"x\r\n")
            while b"STATE=Ax" not in out and b"STATE=Gx" not in out:
                out += await read_until(new, b"x\r\n")
            assert b"STATE=Gx" in out, out
            await new.close()
        finally:
            docker_terminal.INSTANCE = previous

    asyncio.run(go())


def test_an_empty_file_and_mark_like_content_read_back_as_written(
    docker_backend: DockerBackend, make_spec: Any
) -> None:
    """File answers travel between two marks (files.marked); the marks never leak into what is read,
    and an empty file is an empty answer, not a lost one."""

    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        await docker_backend.write_file(ref, "lab1/empty.txt", b"")
        assert await docker_backend.read_file(ref, "lab1/empty.txt") == b""
        tricky = b"labserver-0123456789abcdef0123456789abcdef\nno newline at the end"
        await docker_backend.write_file(ref, "lab1/tricky.txt", tricky)
        assert await docker_backend.read_file(ref, "lab1/tricky.txt") == tricky
        assert [e.path for e in await docker_backend.list_files(ref, "lab1/data")] == ["lab1/data/notes.txt"]

    asyncio.run(go())


def test_a_file_read_survives_an_engine_that_loses_exec_output_simulated(
    docker_backend: DockerBackend, make_spec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moby/moby#27289: under load the engine can end an exec with exit 0 and none of its output,
    which made a file read as empty (the editor would then save an empty file over it). The loss is
    simulated on the real engine's answers (it cannot be provoked on demand): the first two reads
    lose their output and are tried again; a read that loses it every time is an error saying so,
    never an empty file."""
    from labserver.backends.base import BackendError
    from labserver.backends.docker import engines

    real = engines.Engines.exec_blocking
    losses = {"left": 0}

    def lossy(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if losses["left"] > 0:
            losses["left"] -= 1
            return type(result)(0, b"", b"", False, result.duration_s)
        return result

    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        await docker_backend.write_file(ref, "lab1/kept.py", b"print('kept')\n")
        monkeypatch.setattr(engines.Engines, "exec_blocking", staticmethod(lossy))
        losses["left"] = 2
        assert await docker_backend.read_file(ref, "lab1/kept.py") == b"print('kept')\n"
        assert losses["left"] == 0
        losses["left"] = 2
        assert "lab1/kept.py" in {e.path for e in await docker_backend.list_files(ref, "lab1")}
        losses["left"] = 10**6
        with pytest.raises(BackendError) as lost:
            await docker_backend.read_file(ref, "lab1/kept.py")
        assert lost.value.reason == "engine-output" and "Try again" in lost.value.message

    asyncio.run(go())
