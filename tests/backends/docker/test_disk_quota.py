"""Disk and memory attacks on the Docker backend (issue 13 items 10 and 5), against a real engine.

An attendee fills the workspace from the terminal: with ``LABSERVER_DOCKER__WORKSPACE_MB`` the
volume is a size-limited ext4 file system (backends/docker/disk.py), so the write stops at the
limit with ENOSPC, the editor's save answers :class:`WorkspaceFull`, the files survive a restart of
the container, and destroying the environment detaches and deletes the image. A sparse file far
bigger than the editor needs is refused after a stat, never read into the server."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from labserver.backends.base import MAX_READ_BYTES, TooBig, WorkspaceFull
from labserver.backends.docker import disk
from labserver.backends.docker.backend import DockerBackend
from labserver.config import DockerSettings, Settings

pytestmark = pytest.mark.docker

LIMIT_MB = 64


async def used_mb(backend: DockerBackend, ref: Any) -> int:
    out = (await backend.exec(ref, ["sh", "-c", "du -sm /workspace | cut -f1"])).stdout
    return int(out.decode().strip())


def test_an_attendee_cannot_write_past_the_workspace_limit(
    tmp_path: Any, cpu_emu_image: str, make_spec: Any
) -> None:
    docker = DockerSettings(image=cpu_emu_image, workspace_mb=LIMIT_MB)
    settings = Settings(data_dir=tmp_path / "data", docker=docker)
    assert disk.why_not("unix:///var/run/docker.sock", LIMIT_MB) == "", "this machine should support it"
    backend = DockerBackend(settings)
    spec = make_spec()
    images: list[Any] = []

    async def go() -> None:
        ref = await backend.create(spec)
        images.append(disk.image_path(settings.data_dir / "disks", backend._state(ref).volume))
        try:
            # from the terminal, as the attendee: write 200 MB
            script = "dd if=/dev/zero of=/workspace/lab1/fill bs=1M count=200 2>&1; echo rc=$?"
            fill = await backend.exec(ref, ["sh", "-c", script])
            assert b"No space left on device" in fill.stdout, fill.stdout[-300:]
            assert await used_mb(backend, ref) <= LIMIT_MB
            # the editor's save says so (the app answers 507 "Your workspace is full (64 MB)")
            with pytest.raises(WorkspaceFull) as full:
                await backend.write_file(ref, "lab1/new.py", b"x" * 2_000_000)
            assert full.value.size_mb == LIMIT_MB
            # the workspace survives a restart of the container
            await backend.stop(ref)
            ref = await backend.create(spec)
            assert (await backend.read_file(ref, "lab1/solution.py")).startswith(b"def answer")
            assert await used_mb(backend, ref) > LIMIT_MB // 2
            # deleting frees the space again
            await backend.exec(ref, ["rm", "/workspace/lab1/fill"])
            await backend.write_file(ref, "lab1/new.py", b"x" * 2_000_000)
        finally:
            await backend.destroy(ref)
            await backend.aclose()

    asyncio.run(go())
    assert not images[0].exists()
    assert str(images[0]) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


def test_a_huge_sparse_file_is_refused_after_a_stat(docker_backend: DockerBackend, make_spec: Any) -> None:
    async def go() -> None:
        ref = await docker_backend.create(make_spec())
        try:
            await docker_backend.exec(ref, ["truncate", "-s", "2G", "/workspace/lab1/big.bin"])
            with pytest.raises(TooBig) as big:
                await docker_backend.read_file(ref, "lab1/big.bin")
            assert big.value.size == 2 * 1024**3 and big.value.limit == MAX_READ_BYTES
            with pytest.raises(TooBig):
                await docker_backend.archive(ref, "lab1")
            assert (await docker_backend.read_file(ref, "lab1/solution.py")).startswith(b"def answer")
        finally:
            await docker_backend.destroy(ref)

    asyncio.run(go())


def test_a_limited_workspace_comes_back_after_its_loop_device_is_gone(
    tmp_path: Any, cpu_emu_image: str, make_spec: Any
) -> None:
    """A host reboot detaches every loop device: the stopped container's volume names a device
    that holds nothing. Starting the environment attaches its image to that device again, and the
    attendee's files are there (before: the start failed with the engine's mount error)."""
    docker = DockerSettings(image=cpu_emu_image, workspace_mb=LIMIT_MB)
    settings = Settings(data_dir=tmp_path / "data", docker=docker)
    backend = DockerBackend(settings)
    spec = make_spec()

    async def go() -> None:
        ref = await backend.create(spec)
        try:
            await backend.write_file(ref, "lab1/kept.txt", b"still here\n")
            image = disk.image_path(settings.data_dir / "disks", backend._state(ref).volume)
            device = disk.attached_device(image)
            assert device.startswith("/dev/loop"), device
            await backend.stop(ref)
            subprocess.run(["losetup", "-d", device], check=True)  # what a reboot does
            assert disk.attached_device(image) == ""
            ref = await backend.create(spec)
            assert disk.attached_device(image) == device
            assert await backend.read_file(ref, "lab1/kept.txt") == b"still here\n"
        finally:
            await backend.destroy(ref)
            await backend.aclose()

    asyncio.run(go())
