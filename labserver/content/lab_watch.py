"""Labs that follow their files while an author edits them (``labserver serve --dev LAB_DIR...``).

:func:`watch_labs` watches the lab folders with ``watchfiles`` (the change notifications of the
operating system, batched: an editor's save of three files is one change) and, for every lab a
batch touched, loads it again and lints it (:func:`relint`), puts the result in the catalog and
calls ``on_change(lab_id, problems)``, which the app turns into a ``lab.changed`` live event for
the open pages. A lab whose lint finds an error is a :class:`BrokenLab` carrying every problem, so
its page shows them instead of the lab disappearing, and it comes back at the next save that
fixes it.

Rules: the loading and the lint run in a worker thread (they read files), the catalog is changed
in the loop only (a request never sees half a lab); a change under ``__pycache__`` or of an
editor's swap file is no change; a batch is read after ``debounce_ms`` of quiet. Nothing here
knows the server: it is content plus a callback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import watchfiles

from labserver.content.lint import lint_lab
from labserver.content.loader import BrokenLab, Lab, LabCatalog, Problem, load_lab

log = logging.getLogger(__name__)

DEBOUNCE_MS = 150
IGNORED_PARTS = {"__pycache__", ".git", ".pytest_cache", "node_modules"}
IGNORED_SUFFIXES = (".swp", ".swx", ".tmp", "~", ".pyc")


def relint(path: Path) -> tuple[Lab | BrokenLab, list[Problem]]:
    """Load ``path`` and lint it: the lab (a :class:`BrokenLab` with every problem when lint found
    an error) and the problems (errors and warnings)."""
    problems = lint_lab(path)
    if any(p.level == "error" for p in problems):
        return BrokenLab(path.name, path, tuple(problems)), problems
    return load_lab(path), problems


def relevant(_change: watchfiles.Change, path: str) -> bool:
    """The ``watch_filter`` of the watcher: not a cache, a repository folder or a swap file."""
    parts = Path(path).parts
    return not (IGNORED_PARTS & set(parts)) and not path.endswith(IGNORED_SUFFIXES)


def labs_touched(folders: Sequence[Path], changed: Iterable[str]) -> list[Path]:
    """The lab folders (of ``folders``) that contain a changed path, in ``folders``' order."""
    resolved = [(f, f.resolve()) for f in folders]
    hit = {f for f, real in resolved for c in changed if Path(c).resolve().is_relative_to(real)}
    return [f for f in folders if f in hit]


async def watch_labs(
    catalog: LabCatalog,
    folders: Sequence[Path],
    on_change: Callable[[str, list[Problem]], None],
    *,
    stop: asyncio.Event | None = None,
    debounce_ms: int = DEBOUNCE_MS,
) -> None:
    """Until ``stop`` is set (or the task is cancelled): reload and lint each lab of ``folders`` a
    batch of changes touched, put it in ``catalog``, then call ``on_change(lab_id, problems)``."""
    async for changes in watchfiles.awatch(
        *folders, watch_filter=relevant, debounce=debounce_ms, stop_event=stop, recursive=True
    ):
        for folder in labs_touched(folders, (path for _kind, path in changes)):
            loaded, problems = await asyncio.to_thread(relint, folder)
            catalog.put(loaded)
            for problem in problems:
                (log.error if problem.level == "error" else log.warning)("lint: %s", problem)
            log.info("lab %s reloaded: %s", loaded.id, "broken" if isinstance(loaded, BrokenLab) else "ok")
            on_change(loaded.id, problems)
