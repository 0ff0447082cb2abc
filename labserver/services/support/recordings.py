"""An attendee's terminal recordings (the files: :mod:`labserver.terminals.recorder`): listing, one file,
markers from the Check button, deletion with the workspace, and the event's export of them.

Who sees what: a recording belongs to the environment of one attendee, and the environment id is
computed here from the attendee (``env_id_for(event, attendee)``), never taken from a request. So
an attendee's routes reach only their own folder, and an instructor's reach an attendee of the
event the route names (the route checks that the attendee is in it). A recording id from a request
is looked up among that folder's files (``RecordingStore.find``), never joined to a path.

No function here uses a database connection; the blocking ones are for sync routes (run in a
worker thread), :func:`delete_for_environment` runs its file work in a thread."""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from labserver.models import Attendee
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import env_id_for
from labserver.terminals.recorder import RecordingFile, RecordingStore

#: asciicast's media type (what the player and a download receive)
MEDIA_TYPE = "application/x-asciicast"


def store(ctx: AppContext) -> RecordingStore | None:
    return ctx.terminals.recordings


def of_attendee(ctx: AppContext, *, event_id: int, attendee_id: int) -> list[RecordingFile]:
    """The attendee's recordings, newest first (blocking: sync routes run in a worker thread)."""
    rec = store(ctx)
    if rec is None:
        return []
    return rec.list(env_id_for(event_id, attendee_id))


def find(ctx: AppContext, *, event_id: int, attendee_id: int, rec_id: str) -> RecordingFile | None:
    """The attendee's recording ``rec_id``, or None (not theirs, or gone). Blocking."""
    rec = store(ctx)
    if rec is None:
        return None
    return rec.find(env_id_for(event_id, attendee_id), rec_id)


def mark(ctx: AppContext, *, event_id: int, attendee_id: int, lab: str, label: str) -> bool:
    """A marker in the live recording of the attendee's shell in ``lab`` (when one records)."""
    return ctx.terminals.mark((env_id_for(event_id, attendee_id), lab), label)


async def delete_for_environment(ctx: AppContext, env_id: str) -> None:
    """Delete the recordings of ``env_id``: called where its workspace is destroyed, after its
    shells were closed (their last batch is written by then)."""
    rec = store(ctx)
    if rec is not None:
        await rec.delete_env(env_id)


def download_name(r: RecordingFile) -> str:
    return f"{r.lab}-{r.id.split('__', 1)[1]}.cast"


def export_zip(
    ctx: AppContext, *, event_id: int, attendees: list[Attendee], files: dict[str, str], with_recordings: bool
) -> Path:
    """A temporary zip (the caller deletes it) holding ``files`` (name: text) and, when
    ``with_recordings``, every recording of the event's ``attendees`` as
    ``recordings/<attendee id>/<lab>-<time>.cast``. Blocking."""
    rec = store(ctx) if with_recordings else None
    attendee_ids = [a.id for a in attendees if a.id is not None]
    fd, name = tempfile.mkstemp(prefix="labserver-export-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as z:
        for fname, text in files.items():
            z.writestr(fname, text)
        for attendee_id in attendee_ids if rec is not None else []:
            for r in rec.list(env_id_for(event_id, attendee_id)):  # type: ignore[union-attr]
                try:
                    z.write(r.path, f"recordings/{attendee_id}/{download_name(r)}")
                except FileNotFoundError:  # deleted meanwhile with its environment
                    continue
    return Path(name)
