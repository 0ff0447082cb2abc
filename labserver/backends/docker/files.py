"""Workspace files in a container: the shell snippets (run as the attendee's uid through the Docker
API) and the tar/zip conversions. Every path is resolved *inside* the container with ``realpath``
and must stay under ``/workspace``, so a symlink the attendee made cannot lead a file operation
elsewhere (``PathRefused``), just as with the local backend."""

from __future__ import annotations

import io
import tarfile
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path

from labserver.backends.base import FileEntry, PathRefused, TooBig, safe_relpath
from labserver.backends.docker import config as dc

HIDDEN = {".backups", ".labserver-tmp", ".labserver-env.json"}
TMP_DIR = ".labserver-tmp"
MAX_ENTRIES = 5000
EXIT_REFUSED, EXIT_MISSING, EXIT_ISDIR, EXIT_TOO_BIG = 3, 4, 5, 6
NO_SPACE = "no space left on device"  # ENOSPC as the engine and the shell word it

_CHECK = 'case "$p" in /workspace/*) ;; *) exit 3;; esac; '

# $2 = the largest size read (stat first: a bigger file is never sent; its size goes to stderr)
READ = (
    'p=$(realpath -e -- "$1" 2>/dev/null) || exit 4; '
    + _CHECK
    + '[ -d "$p" ] && exit 5; s=$(stat -c %s -- "$p") || exit 4; '
    '[ "$s" -gt "$2" ] && { echo "$s" >&2; exit 6; }; exec head -c "$2" -- "$p"'
)

RESOLVE = (
    'p=$(realpath -e -- "$1" 2>/dev/null) || exit 4; [ "$p" = /workspace ] && { echo "$p"; exit 0; }; '
    + _CHECK
    + 'echo "$p"'
)

LIST = (
    'p=$(realpath -e -- "$1" 2>/dev/null) || exit 4; '
    'if [ "$p" != /workspace ]; then ' + _CHECK + "fi; "
    'cd "$p" && find . -mindepth 1 \\( -name .backups -o -name .labserver-tmp -o -name __pycache__ '
    '-o -name .labserver-env.json \\) -prune -o ! -type l -printf "%y\\t%s\\t%T@\\t%P\\0"'
)

MOVE_INTO_PLACE = (
    'd=$(realpath -m -- "$1"); case "$d" in /workspace/*) ;; *) rm -f -- "$2"; exit 3;; esac; '
    '[ -d "$d" ] && { rm -f -- "$2"; exit 5; }; '
    'mkdir -p -- "$(dirname -- "$d")" && mv -fT -- "$2" "$d"'
)

BACKUP_LAB = (
    'set -e; mkdir -p -- "/workspace/.backups/$1"; '
    'if [ -e "/workspace/$2" ] || [ -L "/workspace/$2" ]; then mv -T -- "/workspace/$2" "/workspace/.backups/$1/$2"; fi'
)


#: tries of a file operation whose output the engine lost (:func:`marked`)
OUTPUT_ATTEMPTS = 3


def marked(script: str) -> str:
    """``script`` run in a subshell with its output between two copies of ``$0`` (a fresh mark per
    call), its exit status kept. The engine sometimes drops the output of a short exec under load
    (moby/moby#27289: exit 0 and nothing read), which would make a file read as empty; a missing
    mark tells that apart from an empty answer (:func:`unmarked`)."""
    return f'printf %s "$0"; (\n{script}\n); rc=$?; printf %s "$0"; exit $rc'


def unmarked(out: bytes, mark: bytes) -> bytes | None:
    """The script's own output from ``out`` of a :func:`marked` run; None when a mark is missing
    (output lost on the way)."""
    if len(out) < 2 * len(mark) or not out.startswith(mark) or not out.endswith(mark):
        return None
    return out[len(mark) : len(out) - len(mark)]


def abs_path(rel: str) -> str:
    rel = safe_relpath(rel)
    return f"{dc.WORKSPACE}/{rel}" if rel else dc.WORKSPACE


def check_writable(rel: str) -> str:
    rel = safe_relpath(rel)
    parts = rel.split("/") if rel else []
    if not parts or parts[-1] in HIDDEN or parts[0] in (TMP_DIR, ".labserver-env.json"):
        raise PathRefused(rel)
    return rel


def parse_listing(out: bytes, base_rel: str) -> list[FileEntry]:
    entries = []
    prefix = f"{base_rel}/" if base_rel else ""
    for raw in out.split(b"\0"):
        if not raw:
            continue
        try:
            kind, size, mtime, path = raw.decode("utf-8", "surrogateescape").split("\t", 3)
        except ValueError:
            continue
        is_dir = kind == "d"
        entries.append(FileEntry(prefix + path, is_dir, 0 if is_dir else int(size), float(mtime)))
    entries.sort(key=lambda e: e.path)
    return entries[:MAX_ENTRIES]


def _skip(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix == ".pyc"


def seed_tar(lab_id: str, starter: Path) -> bytes:
    """The starter folder as a tar rooted at ``<lab_id>/``, owned by the attendee's uid."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_dir(name: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, 0o755, 1000, 1000, now
            tar.addfile(info)

        add_dir(lab_id)
        if starter.is_dir():
            for path in sorted(starter.rglob("*")):
                rel = path.relative_to(starter)
                if _skip(rel) or path.is_symlink():
                    continue
                name = f"{lab_id}/{rel.as_posix()}"
                if path.is_dir():
                    add_dir(name)
                elif path.is_file():
                    data = path.read_bytes()
                    info = tarfile.TarInfo(name)
                    info.size, info.uid, info.gid, info.mtime = len(data), 1000, 1000, now
                    info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                    tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def file_tar(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo(TMP_DIR)
        d.type, d.mode, d.uid, d.gid, d.mtime = tarfile.DIRTYPE, 0o700, 1000, 1000, int(time.time())
        tar.addfile(d)
        info = tarfile.TarInfo(f"{TMP_DIR}/{name}")
        info.size, info.mode, info.uid, info.gid, info.mtime = len(data), 0o644, 1000, 1000, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def read_capped(stream: Iterable[bytes], limit: int, rel: str) -> bytes:
    """The chunks of ``stream`` joined, raising :class:`TooBig` as soon as they pass ``limit``
    (a tar of a folder holding a 2 GiB file is never held whole)."""
    buf = bytearray()
    for chunk in stream:
        buf += chunk
        if len(buf) > limit:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            raise TooBig(f"The folder {rel}", len(buf), limit)
    return bytes(buf)


def tar_to_zip(raw: bytes, arc_root: str) -> bytes:
    """A tar from ``get_archive`` (rooted at the folder's name) as a zip rooted at ``arc_root``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for member in tar:
            if not member.isfile():
                continue
            parts = Path(member.name).parts[1:]
            if not parts or "__pycache__" in parts or parts[0] in HIDDEN:
                continue
            f = tar.extractfile(member)
            if f is not None:
                zf.writestr(f"{arc_root}/{'/'.join(parts)}", f.read())
    return out.getvalue()
