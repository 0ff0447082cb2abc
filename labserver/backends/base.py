"""The environment backend contract.

Every backend (``local``, ``docker``, ``kubernetes``) implements :class:`Backend`. The server never
reaches around it: pages, checks, terminals and the instructor's room all go through these methods,
and one parametrized contract suite (``tests/backends/test_contract.py``) holds every backend to them.
Optional abilities are small capability protocols checked with ``isinstance``: :class:`Stoppable`
(stop, keep the workspace), :class:`WarmPooled` (keep ready environments per event) and
:class:`Closable` (release clients and threads).

Lifecycle
---------
An environment's state (:class:`EnvState`) is stored on its database row by
:func:`labserver.services.provisioning.environments.set_state`, which refuses any change :data:`TRANSITIONS`
does not allow (:func:`check_transition` raises :class:`TransitionRefused`)::

    pending -> provisioning -> ready -> (resetting) -> stopped | failed

Backends report states through :meth:`Backend.status`; they never store them.

When each method may be called
------------------------------
- ``create(spec)`` at any time; idempotent per ``spec.env_id``.
- ``status``, ``exec``, ``terminal``, the file methods, ``reset_lab``, ``archive`` and ``run_check``
  with an :class:`EnvRef` that ``create`` or ``discover`` returned; on a missing or dead environment
  they raise :class:`EnvironmentGone` (never hang). ``status`` never raises for that: it answers.
- ``destroy(ref)`` at any time; destroying what is already gone is success.
- ``discover()`` at any time (at start-up, to re-adopt); it never creates or destroys anything.

Paths given to the file methods are relative to the workspace root (``<lab-id>/file.py``); an
absolute path or one that leaves the workspace raises :class:`PathRefused`.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class EnvState(enum.StrEnum):
    pending = "pending"
    provisioning = "provisioning"
    ready = "ready"
    resetting = "resetting"
    stopped = "stopped"
    failed = "failed"


#: Allowed state transitions of an environment row (a state may always be stored again with a new
#: message, and anything may go to ``failed``). Enforced by :func:`check_transition`.
TRANSITIONS: dict[EnvState, frozenset[EnvState]] = {
    EnvState.pending: frozenset({EnvState.provisioning, EnvState.stopped}),
    EnvState.provisioning: frozenset({EnvState.ready, EnvState.stopped}),
    EnvState.ready: frozenset({EnvState.resetting, EnvState.stopped, EnvState.provisioning}),
    EnvState.resetting: frozenset({EnvState.ready, EnvState.stopped}),
    EnvState.stopped: frozenset({EnvState.provisioning, EnvState.pending}),
    EnvState.failed: frozenset({EnvState.provisioning, EnvState.pending, EnvState.stopped}),
}


class TransitionRefused(RuntimeError):
    """A state change :data:`TRANSITIONS` does not allow: a bug in the caller, never shown to
    attendees as an environment problem."""

    def __init__(self, env_id: str, old: EnvState, new: EnvState) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[old] | {old, EnvState.failed}))
        super().__init__(
            f"environment {env_id}: {old.value} -> {new.value} is not an allowed transition "
            f"(from {old.value}: {allowed})"
        )
        self.env_id, self.old, self.new = env_id, old, new


def transition_allowed(old: EnvState | str, new: EnvState | str) -> bool:
    """True when an environment in state ``old`` may be put in state ``new``."""
    old, new = EnvState(old), EnvState(new)
    return new == old or new == EnvState.failed or new in TRANSITIONS[old]


def check_transition(env_id: str, old: EnvState | str, new: EnvState | str) -> None:
    """Raise :class:`TransitionRefused` unless ``old -> new`` is allowed (see :data:`TRANSITIONS`)."""
    if not transition_allowed(old, new):
        raise TransitionRefused(env_id, EnvState(old), EnvState(new))


class BackendError(Exception):
    """Base of every error a backend raises. ``message`` is for people; ``reason`` is a short label
    counted on the dashboard; ``log`` is detail for the operator's logs."""

    def __init__(self, message: str, *, reason: str = "backend", log: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.log = log


class ProvisionError(BackendError):
    pass


class EnvironmentGone(BackendError):
    def __init__(self, message: str = "This environment no longer exists or is not running.", **kw: Any):
        kw.setdefault("reason", "gone")
        super().__init__(message, **kw)


class PathRefused(BackendError):
    def __init__(self, path: str) -> None:
        super().__init__(f"Path {path!r} is outside your workspace.", reason="path")


#: the file system's limits on one name and on a whole path, in bytes (Linux NAME_MAX, PATH_MAX)
NAME_MAX = 255
PATH_MAX = 4096
#: the largest file the editor API reads (a stat comes first: a bigger file is never read)
MAX_READ_BYTES = 8 * 1024 * 1024
#: the largest lab folder (sum of its files' sizes) the download zips in memory
MAX_ARCHIVE_BYTES = 64 * 1024 * 1024


class NameTooLong(PathRefused):
    def __init__(self, path: str) -> None:
        BackendError.__init__(
            self,
            f"That file name is too long: at most {NAME_MAX} bytes per name and {PATH_MAX - 256} "
            "for the whole path. Choose a shorter name.",
            reason="path",
        )


class WorkspaceFull(BackendError):
    """ENOSPC/EDQUOT on a workspace write; ``size_mb`` is its limit when it has one (else 0)."""

    def __init__(self, size_mb: int = 0) -> None:
        super().__init__(
            f"Your workspace is full ({size_mb} MB): delete files."
            if size_mb
            else "Your workspace is full: delete files.",
            reason="disk-full",
        )
        self.size_mb = size_mb


class TooBig(BackendError):
    """A file or folder too big to handle in the server's memory (answered 413)."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is too big for the browser ({size / 1e6:.1f} MB; at most {limit // 1_000_000} MB): "
            "open it in the terminal instead.",
            reason="too-big",
        )
        self.what = what
        self.size = size
        self.limit = limit


@dataclass(frozen=True)
class LabSeed:
    """A lab to lay out in the workspace: ``/workspace/<lab_id>/`` seeded from ``starter``."""

    lab_id: str
    starter: Path


@dataclass(frozen=True)
class EnvSpec:
    """What to create. ``env_id`` is deterministic (``ev<event>-at<attendee>``) so that a second
    ``create`` finds the first one's environment."""

    env_id: str
    event_id: int
    attendee_id: int
    labs: tuple[LabSeed, ...] = ()
    image: str = "labserver/cpu-emu"
    device: str = "any"  # any | npu | cpu (from lab.yaml requires.device)
    cpus: float = 1.0
    memory_mb: int = 2048
    pids: int = 256
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvRef:
    """A handle to an environment. ``infra_id`` is opaque to everyone but its backend (a folder,
    a container id). ``data`` is backend-specific JSON-able state stored with the environment row so
    a restarted server can hand the reference back."""

    env_id: str
    backend: str
    infra_id: str
    node: str = "local"
    device: str = "cpu-emu"
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "env_id": self.env_id,
                "backend": self.backend,
                "infra_id": self.infra_id,
                "node": self.node,
                "device": self.device,
                "data": dict(self.data),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> EnvRef:
        raw = json.loads(text)
        return cls(**raw)


@dataclass(frozen=True)
class EnvStatus:
    state: EnvState
    message: str = ""
    node: str = "local"
    device: str = "cpu-emu"


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None when killed for the timeout
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    duration_s: float = 0.0


@dataclass(frozen=True)
class CheckUsage:
    """What a check's processes used: ``cpu_s``, CPU seconds (user + system, the children they
    waited for included), and ``run_delay_s``, the seconds the check's work was runnable but
    waiting for a CPU (Linux ``schedstat`` of the processes the others wait for: the leaves of
    its process tree; :mod:`labserver.backends.meter`). Sleeping code adds to neither; code on a
    machine too busy for it adds to the second. ``asleep``: when measured, none of that work was
    running or runnable (all of it slept: a timer, input, a lock)."""

    cpu_s: float
    run_delay_s: float
    asleep: bool = False


@runtime_checkable
class CheckMeter(Protocol):
    """Reads what a running check's processes use (:mod:`labserver.backends.meter` reads
    ``/proc``). The caller may put one in :attr:`CheckRequest.meter`; the fair check queue reads it
    while the check runs (a check that uses no CPU lends its slot) and
    :func:`labserver.checks.timeouts.blame` reads its last sample after a timeout.

    What a backend that runs the checker as a process it can see (``local``) must do with it:

    - ``attach(pid)`` once, as soon as the checker's process exists: the check is that process and
      its descendants; or ``attach(runner_pid, descendants_only=True)`` when a fork server forks the
      checker and its attendee children (the server runs one check per environment and lab at a
      time, so the runner's descendants are that check's processes);
    - ``sample()`` on a timeout, **before** it kills them (afterwards there is nothing to read).

    A backend that cannot see the processes (a remote engine) leaves the meter alone: the check is
    then unmeasured, never idle for the queue, and a timeout is the attendee's as before. Both
    methods are cheap, never raise and may be called from any thread."""

    def attach(self, pid: int, *, descendants_only: bool = False) -> None: ...

    def sample(self) -> CheckUsage | None:
        """What the check used so far (None before ``attach`` or when nothing can be read); once
        the processes are gone, the last sample taken while they lived."""
        ...


@dataclass(frozen=True)
class CheckRequest:
    """Run one step's checker per DESIGN's checker protocol.

    ``checker`` is the checker file on the server (taken from the lab folder, never from the
    workspace); it runs with ``/workspace/<lab_id>`` as working directory, read-only, with ``env``
    (the ``LAB_*`` variables) plus ``LAB_RESULT_FD`` pointing at the result channel, for at most
    ``timeout_s`` seconds (the step's wall budget: :func:`labserver.checks.timeouts.wall_budget`).
    ``meter``: see :class:`CheckMeter` (what a backend must do with it)."""

    lab_id: str
    step_id: str
    checker: Path
    env: Mapping[str, str]
    timeout_s: float = 60.0
    log_limit: int = 64 * 1024
    meter: CheckMeter | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CheckRaw:
    """What the backend saw; :mod:`labserver.checks.verdict` turns it into a verdict."""

    exit_code: int | None
    result: bytes  # everything written to the result channel (at most 1 MiB kept)
    log: bytes  # stdout+stderr interleaved, capped at log_limit
    log_truncated: bool
    timed_out: bool
    duration_s: float
    # CPU seconds of the checker and every process it ran, measured by the backend (the local
    # backend's check runner), or None where the backend cannot measure it
    cpu_s: float | None = None


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the workspace root, '/'-separated
    is_dir: bool
    size: int
    mtime: float


#: What a shell prints at the end of its prompt when its terminal says ``marks_prompt``: OSC 133;B,
#: "prompt ends, input starts" of the FinalTerm semantic-prompt marks (xterm.js, like most terminals,
#: ignores it). Bash's readline has turned the PTY's echo off before it prints the prompt, so input
#: written after this mark is shown once, after the prompt, and never echoed before it.
PROMPT_END = b"\x1b]133;B\x07"
#: :data:`PROMPT_END` as it goes at the end of bash's PS1 (``\[ \]``: it takes no columns)
PS1_PROMPT_END = r"\[\e]133;B\a\]"


@runtime_checkable
class Terminal(Protocol):
    """A bidirectional PTY. ``read`` returns b"" once the shell has exited.

    ``marks_prompt``: the shell's prompts end with :data:`PROMPT_END`, so input that arrives before
    the first one can be held until the shell reads it (:class:`labserver.terminals.sessions.TerminalSession`).
    False: input goes to the PTY at once, and what is typed before the first prompt may show twice."""

    marks_prompt: bool

    async def read(self) -> bytes: ...

    async def write(self, data: bytes) -> None: ...

    async def resize(self, cols: int, rows: int) -> None: ...

    async def close(self) -> None: ...


ProgressCallback = Callable[[str, str], Awaitable[None]]  # (phase, message)


@runtime_checkable
class Backend(Protocol):
    """What every backend provides. Each method's docstring says what it returns, which states it
    may see or cause, and when it may be called (module docstring: the lifecycle)."""

    #: the ``LABSERVER_BACKEND`` value that selects this backend; stored on environment rows
    name: str

    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        """Provide the environment ``spec`` describes and return its reference once it is usable.

        Returns an :class:`EnvRef` whose :meth:`status` is ``ready``. Idempotent per
        ``spec.env_id``: an existing environment is reused (and started if stopped), else one is
        made. Labs of ``spec.labs`` whose folder does not exist are seeded from their starter;
        existing folders are never touched. Phases (``placing``, ``creating``, ``seeding``,
        ``ready``, ...) go to ``progress(phase, message)`` for the attendee's page.

        The caller stores ``provisioning`` before and ``ready`` (or ``failed``) after. May be called
        at any time, also concurrently for one ``env_id`` (the second call waits and reuses).
        Raises :class:`ProvisionError` (``reason``: ``engine-down``, ``image-missing``, ``no-room``,
        ``no-card``, ``disk``, ...) when it cannot."""
        ...

    async def status(self, ref: EnvRef) -> EnvStatus:
        """Poll the environment: ``ready`` (usable), ``provisioning`` (starting), ``stopped``
        (gone or stopped, workspace possibly kept) or ``failed`` (crashed, or the engine does not
        answer). Never ``pending`` or ``resetting``: those are the server's own states.

        Never raises for a missing environment and never hangs: it answers. May be called at any
        time with a reference ``create`` or ``discover`` returned; the server calls it on restart
        (reconcile) and when a stored ``ready`` row turned out not to be."""
        ...

    async def exec(
        self,
        ref: EnvRef,
        argv: Sequence[str],
        *,
        timeout: float = 60.0,
        readonly: bool = False,
        cwd: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the environment (``cwd`` workspace-relative) and return its exit code and
        output; ``exit_code`` is None and ``timed_out`` True when it was killed after ``timeout``
        seconds. ``readonly`` runs it where the workspace cannot be written.

        Needs a ``ready`` environment; raises :class:`EnvironmentGone` when it is not running and
        :class:`PathRefused` for a ``cwd`` outside the workspace. Changes no state."""
        ...

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        """Run ``request.checker`` per DESIGN's checker protocol (working directory
        ``/workspace/<lab>``, read-only where the backend allows, ``request.env`` plus
        ``LAB_RESULT_FD``) and return what happened (:class:`CheckRaw`);
        :func:`labserver.checks.verdict.interpret` turns that into a verdict.

        Needs a ``ready`` environment (the one place a backend may poll its own status before a
        check); raises :class:`EnvironmentGone` otherwise. Changes no state."""
        ...

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> Terminal:
        """Open an interactive shell on a PTY of ``cols`` x ``rows`` in ``cwd`` (workspace-relative;
        the workspace root when it does not exist) and return it.

        Needs a ``ready`` environment; raises :class:`EnvironmentGone` otherwise. The shell lives
        until :meth:`Terminal.close` or until it exits (``read`` returns ``b""``)."""
        ...

    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]:
        """Every file and folder under ``path`` (workspace-relative, recursive, at most 5000),
        without the backend's own hidden files.

        Needs a ``ready`` environment; raises :class:`EnvironmentGone`, :class:`PathRefused` or
        ``FileNotFoundError``."""
        ...

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        """The bytes of the file ``path`` (workspace-relative).

        Needs a ``ready`` environment; raises :class:`EnvironmentGone`, :class:`PathRefused`
        (outside the workspace, symlinks included), ``FileNotFoundError`` or
        ``IsADirectoryError``."""
        ...

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        """Replace the file ``path`` with ``data`` atomically (a reader never sees half a file;
        concurrent writes of one file all succeed, the last one wins), making folders as needed.

        Needs a ``ready`` environment; raises :class:`EnvironmentGone` or :class:`PathRefused`."""
        ...

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        """Move ``/workspace/<lab>`` to ``/workspace/.backups/<backup_name>/<lab>`` and seed it again
        from the starter; returns the backup path (workspace-relative).

        Needs a ``ready`` environment; the caller stores ``resetting`` before and ``ready`` after.
        Raises :class:`EnvironmentGone` or :class:`PathRefused`."""
        ...

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        """A zip of the folder ``path`` (workspace-relative), its entries under the folder's name.

        Needs a ``ready`` environment; raises :class:`EnvironmentGone`, :class:`PathRefused` or
        ``FileNotFoundError``."""
        ...

    async def destroy(self, ref: EnvRef) -> None:
        """Remove the environment and its workspace. Destroying what is already gone is success.

        May be called at any time; afterwards :meth:`status` answers ``stopped`` (or ``failed``)
        and every other method raises :class:`EnvironmentGone`. Raises :class:`BackendError` only
        when the infrastructure does not answer."""
        ...

    async def discover(self) -> list[EnvRef]:
        """The environments of this backend (and this server's name prefix) that exist now, found
        from the infrastructure alone (labels, marker files), so a restarted server re-adopts them.

        May be called at any time; never creates, starts or destroys anything."""
        ...


@runtime_checkable
class Stoppable(Protocol):
    """A backend whose environments can be stopped and started again, keeping the workspace
    (Docker: the container stops, the volume stays). The idle culler and ``labserver env stop``
    act only on backends that are :class:`Stoppable`."""

    async def stop(self, ref: EnvRef) -> None:
        """Stop the environment, keep its workspace; :meth:`Backend.create` starts it again.

        May be called on a ``ready`` environment; the caller stores ``stopped`` after. Stopping
        what is already stopped or gone is success."""
        ...


@runtime_checkable
class WarmPooled(Protocol):
    """A backend that keeps ready environments per event so joining is instant (Docker)."""

    async def prepare_event(self, event_id: int, template: EnvSpec, size: int | None = None) -> int:
        """Keep ``size`` ready environments made from ``template`` for ``event_id`` (0: stop warming
        it and remove the unclaimed ones); returns how many were made now.

        May be called at any time and repeatedly (the housekeeping loop does, every minute);
        :meth:`Backend.create` then claims a compatible warm environment before making one."""
        ...


@runtime_checkable
class Closable(Protocol):
    """A backend holding clients or threads that must be released (Docker)."""

    async def aclose(self) -> None:
        """Release clients and threads. Call once, when the backend will not be used again."""
        ...


async def backoff(
    fn: Callable[[], Any],
    *,
    attempts: int = 8,
    first: float = 0.05,
    factor: float = 2.0,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
) -> Any:
    """The one retry helper: call ``fn`` (a coroutine function) until it succeeds, sleeping
    first, first*factor, ... between attempts; re-raises the last error."""
    delay = first
    for attempt in range(attempts):
        try:
            return await fn()
        except retry_on:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(delay)
            delay *= factor
    raise AssertionError("unreachable")


def safe_relpath(path: str) -> str:
    """Normalise a workspace-relative path, refusing absolute paths, ``..`` and NUL."""
    if "\x00" in path or path.startswith(("/", "\\")):
        raise PathRefused(path)
    parts: list[str] = []
    for part in path.replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise PathRefused(path)
        if len(part.encode("utf-8", "replace")) > NAME_MAX:
            raise NameTooLong(path)
        parts.append(part)
    rel = "/".join(parts)
    if len(rel.encode("utf-8", "replace")) > PATH_MAX - 256:  # room for the workspace's own path
        raise NameTooLong(path)
    return rel


async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)
