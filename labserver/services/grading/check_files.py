"""Digests of the files a passing check judged, kept for completion records
(:mod:`labserver.services.reporting.completion`).

When a check passes, :func:`digest_lab` takes the attendee's lab folder in one backend call (its
``archive``: on Docker the engine reads the container's filesystem, nothing runs inside it) and
hashes every file (SHA-256) within limits (:data:`MAX_FILES` files, :data:`MAX_HASH_BYTES` per
file, :data:`MAX_TOTAL_BYTES` in all; a file beyond them is listed with its size and no digest).
A folder too big for an archive is listed and read file by file instead. The folder is read right
after the checker returned, with the same environment; a file the attendee saved in between would
be hashed in its new state, so a digest never vouches for more than the server saw.
No database session is held while the files are read; the caller
(:func:`labserver.services.grading.checking.run_check`) commits them as a ``CheckFiles`` row in the same
transaction as the run's verdict.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import zipfile
from typing import Any

from labserver.backends.base import BackendError, EnvRef
from labserver.services.context import AppContext

MAX_FILES = 200
MAX_HASH_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024
SKIPPED_DIRS = {"__pycache__", ".ipynb_checkpoints"}


def _skipped(path: str) -> bool:
    return bool(SKIPPED_DIRS & set(path.split("/")))


def digests_of_zip(raw: bytes) -> list[dict[str, Any]]:
    """The digests of the files of an ``archive`` (entries under the folder's name)."""
    out: list[dict[str, Any]] = []
    total = 0
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        infos = sorted((i for i in zf.infolist() if not i.is_dir()), key=lambda i: i.filename)
        for info in infos:
            rel = info.filename.split("/", 1)[-1]
            if _skipped(rel):
                continue
            if len(out) >= MAX_FILES:
                break
            digest: str | None = None
            if info.file_size <= MAX_HASH_BYTES and total + info.file_size <= MAX_TOTAL_BYTES:
                total += info.file_size
                digest = hashlib.sha256(zf.read(info)).hexdigest()
            out.append({"path": rel, "size": info.file_size, "sha256": digest})
    return out


async def digest_lab(ctx: AppContext, ref: EnvRef, lab_id: str) -> list[dict[str, Any]]:
    """``[{"path", "size", "sha256"}]`` for the files of ``/workspace/<lab_id>`` (paths relative to
    the lab folder, sorted); an empty list when the backend can neither archive nor list them."""
    try:
        return await asyncio.to_thread(digests_of_zip, await ctx.backend.archive(ref, lab_id))
    except (BackendError, FileNotFoundError, zipfile.BadZipFile):
        pass  # too big for one archive: file by file
    try:
        entries = await ctx.backend.list_files(ref, lab_id)
    except BackendError:
        return []
    prefix = lab_id + "/"
    files = sorted(
        (e for e in entries if not e.is_dir and not _skipped(e.path.removeprefix(prefix))),
        key=lambda e: e.path,
    )
    out: list[dict[str, Any]] = []
    total = 0
    for entry in files[:MAX_FILES]:
        digest: str | None = None
        if entry.size <= MAX_HASH_BYTES and total + entry.size <= MAX_TOTAL_BYTES:
            try:
                data = await ctx.backend.read_file(ref, entry.path)
            except BackendError:
                data = None
            if data is not None:
                total += len(data)
                digest = hashlib.sha256(data).hexdigest()
        out.append({"path": entry.path.removeprefix(prefix), "size": entry.size, "sha256": digest})
    return out
