"""File operations on a local workspace that no swapped path component can lead out of it.

Threat model
------------
The server reads and writes an attendee's workspace for the editor, the download, the reset and
the instructor's "reveal solution", *outside* the sandbox, with the server's privileges (root, on
many installations). The attendee controls every name in the workspace and can change any of them
at any moment from their terminal: replace a folder by a symlink to another attendee's workspace,
swap the two atomically in a loop (``renameat2(RENAME_EXCHANGE)``), plant a FIFO, make
``.backups`` a symlink. Checking a path and then opening it (``resolve()`` then ``open()``) loses
that race: the issue saw 3 of 5 reads and writes within 50 saves escape.

Mechanism
---------
No path is ever resolved as a whole. :class:`Workspace` opens the workspace folder once, then
walks one component at a time with ``openat(dir_fd, name, O_NOFOLLOW | O_DIRECTORY)`` and does
the final operation relative to the last folder's descriptor (``dir_fd=``): whatever the attendee
renames afterwards, the descriptors held keep pointing into the workspace. Python 3.11 has no
``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``; this walk gives the same guarantee and works on
every kernel. A component that is a symlink is refused (:class:`PathRefused`), never followed;
``..`` and absolute paths are refused before any of this (:func:`safe_relpath`).

- read: ``O_NOFOLLOW | O_NONBLOCK``, then ``fstat`` must say a regular file (a FIFO would block the
  server, a socket or device has no business here);
- write: a new temp file (``O_CREAT | O_EXCL | O_NOFOLLOW``) in the target's folder, then
  ``renameat`` over the name (replacing a symlink there, never writing through it); folders made
  on the way are opened ``O_NOFOLLOW`` right after ``mkdirat``;
- list and zip: ``scandir`` on descriptors, symlinks skipped, recursion by ``openat(O_NOFOLLOW)``;
- delete: ``unlinkat`` / ``shutil.rmtree(dir_fd=)`` (which itself never follows symlinks);
- reset: ``.backups`` must be a real folder (a symlink there is refused), the lab folder is moved
  with ``renameat`` (a symlink in its place is moved as a symlink), and the starter is copied into a
  folder made by ``mkdirat`` with files created ``O_EXCL | O_NOFOLLOW``.

Hard links cannot bring a file in from outside: the sandbox sees the workspace as its own mount,
and the kernel refuses a link across mounts. When the server is root, everything created here is
given to the environment's uid (``owner``) through the descriptor (``fchown``), never by path.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from labserver.backends.base import (
    MAX_ARCHIVE_BYTES,
    MAX_READ_BYTES,
    FileEntry,
    PathRefused,
    TooBig,
    safe_relpath,
)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_ENTRIES = 5000
SKIP_DIRS = {"__pycache__"}


class Workspace:
    """One workspace folder. ``owner`` (uid, gid): who gets what the server creates in it (the
    environment's uid when the server is root), else None (the server's own uid). ``hidden``: names
    never listed, zipped or written (the backend's marker, ``.backups``)."""

    def __init__(
        self, root: Path, owner: tuple[int, int] | None = None, hidden: frozenset[str] = frozenset()
    ):
        self.root = root
        self.owner = owner
        self.hidden = hidden

    # -- walking ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _dir(self, rel: str, *, create: bool = False) -> Iterator[int]:
        """A descriptor of the folder ``rel`` (workspace-relative), opened one component at a time
        without following symlinks; ``create`` makes missing folders."""
        fd = os.open(self.root, DIR_FLAGS)
        try:
            for name in _parts(rel):
                nxt = self._step(fd, name, rel, create=create)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _step(self, fd: int, name: str, rel: str, *, create: bool) -> int:
        """The folder ``name`` in ``fd`` (made when missing and ``create``); ``fd`` stays open."""
        try:
            return os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno != errno.ENOENT or not create:
                raise _refused(exc, rel, fd, name) from None
        try:
            with contextlib.suppress(FileExistsError):  # made meanwhile: the open decides
                os.mkdir(name, 0o755, dir_fd=fd)
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _refused(exc, rel, fd, name) from None
        try:
            self._give(nxt)
        except BaseException:
            os.close(nxt)
            raise
        return nxt

    def _give(self, fd: int) -> None:
        if self.owner is not None:
            os.fchown(fd, *self.owner)

    def is_dir(self, rel: str) -> bool:
        """Whether ``rel`` is a folder reached without any symlink."""
        try:
            with self._dir(rel):
                return True
        except (FileNotFoundError, PathRefused, NotADirectoryError):
            return False

    # -- files ----------------------------------------------------------------------------------
    def read(self, rel: str) -> bytes:
        rel = safe_relpath(rel)
        parent, name = _split(rel)
        with self._dir(parent) as dfd:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                raise _refused(exc, rel, dfd, name) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(rel)
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(rel)
            if st.st_size > MAX_READ_BYTES:  # stat first: a 2 GiB (sparse) file is never read
                raise TooBig(rel, st.st_size, MAX_READ_BYTES)
            return f.read(MAX_READ_BYTES + 1)

    def write(self, rel: str, data: bytes) -> None:
        rel = safe_relpath(rel)
        parent, name = _split(rel)
        if name in self.hidden:
            raise PathRefused(rel)
        with self._dir(parent, create=True) as dfd:
            mode = 0o644
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISREG(st.st_mode):
                    mode = stat.S_IMODE(st.st_mode) & 0o777  # saving keeps a script executable
                elif stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(rel)
                elif stat.S_ISLNK(st.st_mode):
                    raise PathRefused(rel)  # as reads: a symlink is neither followed nor replaced
            # a name of its own per write: two saves of one file at once must not share a temp file
            tmp = f".{name[:200]}.{secrets.token_hex(6)}.saving"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd
            )
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    os.fchmod(f.fileno(), mode)
                    self._give(f.fileno())
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # never a half-written file
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                if isinstance(exc, IsADirectoryError | NotADirectoryError):
                    raise IsADirectoryError(rel) from None
                raise

    def delete(self, rel: str) -> None:
        """Remove the file or folder ``rel``; a symlink is removed itself, never followed."""
        rel = safe_relpath(rel)
        parent, name = _split(rel)
        if not name:
            raise PathRefused(rel)
        with self._dir(parent) as dfd:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                raise FileNotFoundError(rel) from None
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=dfd)
            else:
                os.unlink(name, dir_fd=dfd)

    # -- trees -----------------------------------------------------------------------------------
    def _walk(self, dfd: int, prefix: str, visit: Callable[[int, str, os.DirEntry[str]], None]) -> None:
        """Depth first, in name order, without following symlinks; ``visit(dir_fd, rel, entry)``
        for every entry that is not hidden, a symlink, a temp file or ``__pycache__``."""
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.name in self.hidden or entry.name in SKIP_DIRS or entry.name.endswith(".saving"):
                continue
            if entry.is_symlink():
                continue
            rel = f"{prefix}{entry.name}"
            visit(dfd, rel, entry)
            if entry.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(entry.name, DIR_FLAGS, dir_fd=dfd)
                except OSError:
                    continue  # swapped for a symlink meanwhile: not followed
                try:
                    self._walk(sub, rel + "/", visit)
                finally:
                    os.close(sub)

    def listing(self, rel: str) -> list[FileEntry]:
        rel = safe_relpath(rel)
        out: list[FileEntry] = []

        class Enough(Exception):
            pass

        def visit(_dfd: int, path: str, entry: os.DirEntry[str]) -> None:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return
            is_dir = stat.S_ISDIR(st.st_mode)
            out.append(FileEntry(path, is_dir, 0 if is_dir else st.st_size, st.st_mtime))
            if len(out) >= MAX_ENTRIES:
                raise Enough

        with self._dir(rel) as dfd, contextlib.suppress(Enough):
            self._walk(dfd, f"{rel}/" if rel else "", visit)
        return out

    def zip(self, rel: str, arc_root: str) -> bytes:
        rel = safe_relpath(rel)
        buf = io.BytesIO()
        total = 0
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:

            def visit(dfd: int, path: str, entry: os.DirEntry[str]) -> None:
                nonlocal total
                if not entry.is_file(follow_symlinks=False):
                    return
                try:
                    fd = os.open(
                        entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd
                    )
                except OSError:
                    return
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        return
                    total += st.st_size
                    if total > MAX_ARCHIVE_BYTES:  # the zip is built in memory: stat first
                        raise TooBig(f"The folder {arc_root}", total, MAX_ARCHIVE_BYTES)
                    info = zipfile.ZipInfo(f"{arc_root}/{path[len(rel) + 1 if rel else 0 :]}")
                    info.date_time = time.localtime(max(st.st_mtime, 315532800))[:6]
                    info.external_attr = (st.st_mode & 0xFFFF) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    zf.writestr(info, f.read())

            with self._dir(rel) as dfd:
                self._walk(dfd, f"{rel}/" if rel else "", visit)
        return buf.getvalue()

    # -- reset and seeding -----------------------------------------------------------------------
    def seed(self, name: str, starter: Path) -> None:
        """Copy the trusted folder ``starter`` to a new folder ``name`` at the workspace root. An
        existing ``name`` (folder, file or symlink) is left as it is."""
        name = safe_relpath(name)
        if "/" in name or not name:
            raise PathRefused(name)
        with self._dir("") as root:
            try:
                os.mkdir(name, 0o755, dir_fd=root)
            except FileExistsError:
                return
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=root)
            except OSError as exc:
                raise _refused(exc, name, root, name) from None
        try:
            self._give(fd)
            if starter.is_dir():
                self._copy_into(fd, starter)
        finally:
            os.close(fd)

    def _copy_into(self, dfd: int, source: Path) -> None:
        for entry in sorted(os.scandir(source), key=lambda e: e.name):
            if entry.name in SKIP_DIRS or entry.name.endswith(".pyc"):
                continue
            st = entry.stat()  # the starter is trusted: its symlinks are copied as what they point to
            mode = stat.S_IMODE(st.st_mode) & 0o777
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(entry.name, 0o755, dir_fd=dfd)
                sub = os.open(entry.name, DIR_FLAGS, dir_fd=dfd)
                try:
                    os.fchmod(sub, mode | 0o700)
                    self._give(sub)
                    self._copy_into(sub, Path(entry.path))
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                out = os.open(entry.name, flags, mode, dir_fd=dfd)
                with os.fdopen(out, "wb") as dst, open(entry.path, "rb") as src:
                    shutil.copyfileobj(src, dst, 1024 * 1024)
                    os.fchmod(dst.fileno(), mode)
                    self._give(dst.fileno())
                    os.utime(dst.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))

    def move_to_backup(self, name: str, backup_name: str) -> str | None:
        """Move the folder ``name`` to ``.backups/<backup_name>/<name>``; returns that path, or None
        when there was nothing to move. ``.backups`` (and the dated folder in it) must be real
        folders: a symlink there is refused. A symlink at ``name`` is moved as it is."""
        name, backup_name = safe_relpath(name), safe_relpath(backup_name)
        if "/" in name or "/" in backup_name or not name or not backup_name:
            raise PathRefused(f"{backup_name}/{name}")
        dest = f".backups/{backup_name}/{name}"
        with self._dir("") as root:
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISDIR(os.stat(".backups", dir_fd=root, follow_symlinks=False).st_mode):
                    raise PathRefused(".backups")
            try:
                os.stat(name, dir_fd=root, follow_symlinks=False)
            except FileNotFoundError:
                return None
            with self._dir(f".backups/{backup_name}", create=True) as backup:
                os.rename(name, name, src_dir_fd=root, dst_dir_fd=backup)
        return dest

    def chown_tree(self) -> None:
        """Give everything in the workspace to ``owner`` (a workspace made before the server ran
        environments under their own uid). Never follows a symlink."""
        if self.owner is None:
            return
        uid, gid = self.owner
        root = os.open(self.root, DIR_FLAGS)
        try:
            os.fchown(root, uid, gid)
            for _top, dirs, files, dfd in os.fwalk(dir_fd=root, follow_symlinks=False):
                for name in dirs + files:
                    with contextlib.suppress(OSError):
                        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(root)


def _parts(rel: str) -> list[str]:
    return [p for p in safe_relpath(rel).split("/") if p]


def _split(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    if not name:
        raise PathRefused(rel)
    return parent, name


def _refused(exc: OSError, rel: str, dir_fd: int | None = None, name: str = "") -> Exception:
    """A symlink is refused (``PathRefused``); a missing name, or a file where a folder should be,
    is 'no such file'. ``O_NOFOLLOW`` reports a symlink as ELOOP, or as ENOTDIR with O_DIRECTORY."""
    if exc.errno == errno.ELOOP:
        return PathRefused(rel)
    if exc.errno == errno.ENOTDIR and dir_fd is not None and name:
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return PathRefused(rel)
    if exc.errno in (errno.ENOTDIR, errno.ENOENT):
        return FileNotFoundError(rel)
    return exc
