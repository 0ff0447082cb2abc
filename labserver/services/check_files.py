"""Digests of the files a passing check judged, kept for completion records
(:mod:`labserver.services.completion`).

When a check passes, :func:`digest_lab` lists the attendee's lab folder through the backend and
hashes every file (SHA-256), within limits (:data:`MAX_FILES` files, :data:`MAX_HASH_BYTES` per
file, :data:`MAX_TOTAL_BYTES` in all; a file beyond them is listed with its size and no digest).
The folder is read right after the checker returned, with the same environment; a file the
attendee saved in between would be hashed in its new state, which the record then says (its digest
no longer matches a later copy), so a digest never vouches for more than the server saw.
No database session is held while the files are read; the caller
(:func:`labserver.services.checking.run_check`) commits them as a ``CheckFiles`` row in the same
transaction as the run's verdict.
"""

from __future__ import annotations

import hashlib
from typing import Any

from labserver.backends.base import BackendError, EnvRef
from labserver.services.context import AppContext

MAX_FILES = 200
MAX_HASH_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024
SKIPPED_DIRS = {"__pycache__", ".ipynb_checkpoints"}


async def digest_lab(ctx: AppContext, ref: EnvRef, lab_id: str) -> list[dict[str, Any]]:
    """``[{"path", "size", "sha256"}]`` for the files of ``/workspace/<lab_id>`` (paths relative to
    the lab folder, sorted); an empty list when the backend cannot list them."""
    try:
        entries = await ctx.backend.list_files(ref, lab_id)
    except BackendError:
        return []
    prefix = lab_id + "/"
    files = sorted(
        (e for e in entries if not e.is_dir and not SKIPPED_DIRS & set(e.path.split("/"))),
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
