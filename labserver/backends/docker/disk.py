"""A size limit for each environment's workspace volume (issue 13 item 10).

Docker's own ``--storage-opt size=`` needs overlay2 on XFS with project quotas, and a volume has no
size at all. What works on an ext4 host (the project's machines: overlay2 on extfs) and keeps the
workspace across container and server restarts: each workspace volume is an ext4 file system in a
sparse image file ``<disks_dir>/<volume>.img`` of ``LABSERVER_DOCKER__WORKSPACE_MB``, attached to a
loop device by the server and given to Docker as a ``local`` volume with ``type=ext4,device=/dev/loopN``
(Docker's local driver has no ``o=loop``). A full workspace is ENOSPC inside the container (the
shell says "No space left on device"; the editor answers 507 with the size).

Needs: the engine on this machine (``unix://`` socket; a remote node's images would live on that
node), a root server (``losetup``, ``mkfs.ext4``), free loop devices. Otherwise, or with
``workspace_mb = 0``, volumes are plain (no limit) and :func:`why_not` says why at start. After a
reboot of the host the loop devices are gone: before a stopped container starts again,
:func:`reattach` attaches its image to the very device the volume names (a volume's options cannot
change), so the workspace comes back with everything in it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

LOCAL_SOCKET = "unix:///var/run/docker.sock"


def why_not(host: str, workspace_mb: int) -> str:
    """Empty when per-volume size limits work for ``host``; else the reason they are off."""
    if workspace_mb <= 0:
        return "LABSERVER_DOCKER__WORKSPACE_MB is 0"
    if host != LOCAL_SOCKET:
        return f"the engine {host} is not on this machine"
    if os.geteuid() != 0:
        return "the server is not root (losetup)"
    missing = [t for t in ("losetup", "mkfs.ext4") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control"
    return ""


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()


def image_path(disks_dir: Path, volume: str) -> Path:
    return disks_dir / f"{volume}.img"


def attached_device(image: Path) -> str:
    """The loop device ``image`` is attached to, or ''."""
    out = _run("losetup", "-j", str(image))
    return out.split(":", 1)[0] if out else ""


def prepare(disks_dir: Path, volume: str, size_mb: int) -> dict[str, str]:
    """Make (once) the image of ``volume`` and attach it; returns the volume's ``driver_opts``."""
    disks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    image = image_path(disks_dir, volume)
    if not image.exists():
        tmp = image.with_suffix(".new")
        with open(tmp, "wb") as f:
            f.truncate(size_mb * 1024 * 1024)
        # owned by the attendee's uid in the container; no blocks reserved for root
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=1000:1000", str(tmp))
        tmp.rename(image)
    device = attached_device(image) or _run("losetup", "-f", "--show", str(image))
    return {"type": "ext4", "device": device}


def reattach(disks_dir: Path, volume: str, device: str) -> bool:
    """Attach ``volume``'s image to ``device`` again when it is not (after a host reboot, or a
    ``losetup -d`` by hand); True when it had to. Raises :class:`OSError` saying why it cannot
    (the device holds another file now, or the image is gone)."""
    image = image_path(disks_dir, volume)
    if not image.exists():
        raise OSError(f"the workspace image {image} is missing")
    current = attached_device(image)
    if current == device:
        return False
    if current:
        raise OSError(f"{image} is attached to {current}, but its volume names {device}")
    if not Path(device).exists():  # loop nodes beyond the first few appear only when asked for
        _run("losetup", "-f")  # nudges loop-control; mknod is the fallback
        if not Path(device).exists():
            number = int(device.removeprefix("/dev/loop"))
            os.mknod(device, 0o660 | 0o060000, os.makedev(7, number))
    _run("losetup", device, str(image))
    return True


def release(disks_dir: Path, volume: str) -> None:
    """Detach and delete the image of ``volume`` (after the volume is removed); nothing if none."""
    image = image_path(disks_dir, volume)
    if not image.exists():
        return
    device = attached_device(image)
    if device:
        _run("losetup", "-d", device)
    image.unlink(missing_ok=True)
