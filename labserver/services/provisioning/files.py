"""Saving from the editor: a write that only lands on the version the attendee's text started from.

The editor sends ``If-Match`` with the ETag it loaded (or last saved) the file at. The ETag is a hash
of the bytes on disk, never of times, so reading a file, running a check on it or touching it does
not change it; only other content does. Compare and write are one step per environment
(``AppContext.file_lock``): two saves that start from one version (two tabs, a double Ctrl+S) cannot
both pass the comparison, so the second is refused instead of silently replacing the first. A
write from the terminal is outside that lock; it can land between the comparison and the write, and
then the terminal's text is the one replaced, as if it had come a moment earlier."""

from __future__ import annotations

import hashlib

from labserver.backends.base import EnvRef
from labserver.services.context import AppContext


def etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


class Conflict(Exception):
    """The file on disk is not the version ``If-Match`` named; ``etag`` is what it is now."""

    def __init__(self, etag: str) -> None:
        super().__init__(etag)
        self.etag = etag


async def save(ctx: AppContext, ref: EnvRef, path: str, data: bytes, *, if_match: str = "") -> str:
    """Write ``data`` to ``path`` (workspace-relative) and return its ETag. With ``if_match`` (an
    ETag, quotes allowed; ``*`` or empty: any version), raise :class:`Conflict` and write nothing
    when the file exists with other content. A missing file is created whatever ``if_match`` says."""
    wanted = if_match.strip().strip('"')
    async with ctx.file_lock(ref.env_id):
        if wanted and wanted != "*":
            try:
                current = await ctx.backend.read_file(ref, path)
            except FileNotFoundError:
                current = None
            if current is not None and etag(current) != wanted:
                raise Conflict(etag(current))
        await ctx.backend.write_file(ref, path, data)
    return etag(data)
