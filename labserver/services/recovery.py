"""After a crash (issue 13 item 9): what a server that died mid-work left behind, cleaned up at start.

- **Orphaned check runs.** A run is ``running`` from the moment the Check button is pressed until
  its result is committed; a server killed in between leaves it ``running`` forever (the attendee's
  page waits, the grid shows a check in progress). At start, before anything else can start a check,
  every ``running`` row is finished as ``interrupted`` ("error: the server restarted") with a message
  saying to press Check again. ``interrupted`` costs the attendee nothing: it is not an attempt
  (services/progress.py, services/room.py), not a failure, and does not feed the stuck detector.
- **Leaked grader containers.** A check on the Docker backend runs in a grader container labelled
  ``labserver.role=grader`` with this server's instance label; at start no check of this server can
  be running, so every such grader is a leftover and is removed (the backend's ``stale_graders`` /
  ``remove_container``; backends without graders have nothing to reap).

Both are called from the app's lifespan (labserver/app.py). Tests: tests/services/test_recovery.py
(a real ``kill -9`` of a server subprocess during a check).
"""

from __future__ import annotations

import logging

from sqlalchemy import update
from sqlmodel import Session, col

from labserver import clock
from labserver.backends.base import Backend
from labserver.models import CheckRun, CheckStatus

log = logging.getLogger(__name__)

RESTARTED = (
    "The server restarted during this check, so it did not finish. It does not count as an attempt: "
    "press Check again."
)


def finish_orphaned_runs(session: Session) -> int:
    """Finish every ``running`` check run as ``interrupted`` (committed); returns how many."""
    result = session.execute(
        update(CheckRun)
        .where(col(CheckRun.status) == CheckStatus.running)
        .values(status=CheckStatus.interrupted, message=RESTARTED, finished_at=clock.now())
    )
    session.commit()
    count = int(getattr(result, "rowcount", 0) or 0)
    if count:
        log.warning("%d check run(s) left running by a previous server finished as interrupted", count)
    return count


async def reap_leaked_graders(backend: Backend) -> int:
    """Remove the grader containers a previous server of this instance left behind."""
    stale = getattr(backend, "stale_graders", None)
    remove = getattr(backend, "remove_container", None)
    if stale is None or remove is None:
        return 0
    leaked = await stale(older_than_s=0.0)
    for container in leaked:
        log.warning("removing grader container %s left by a previous server", getattr(container, "name", "?"))
        await remove(container)
    return len(leaked)
