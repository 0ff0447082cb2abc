"""The environment backend contract.

Every backend (``local``, ``docker``, ``kubernetes``) implements :class:`Backend`. The server never
reaches around it: pages, checks, terminals and the instructor's room all go through these methods,
and one parametrized contract suite (``tests/backends/test_contract.py``) holds every backend to them.

Lifecycle and when each method may be called
--------------------------------------------
- ``create(spec)`` may be called at any time and is idempotent per ``spec.env_id``: if the
  environment exists it is reused (and started if stopped), else it is made. It returns once the
  environment is ``ready`` or raises :class:`ProvisionError`. Labs listed in the spec whose folder
  does not exist yet are seeded from their ``starter`` directory; existing folders are never touched.
- ``status``, ``exec``, ``terminal``, the file methods and ``run_check`` need an environment that
  ``create`` returned; on a missing or dead one they raise :class:`EnvironmentGone` (never hang).
- ``destroy(ref)`` removes the environment and its workspace; destroying what is already gone is
  success.
- ``discover()`` lists the environments this backend finds (by label / folder) after a server
  restart, so the server can re-adopt them. It never creates or destroys anything.

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


#: Allowed state transitions (anything may go to ``failed``).
TRANSITIONS: dict[EnvState, frozenset[EnvState]] = {
    EnvState.pending: frozenset({EnvState.provisioning, EnvState.stopped}),
    EnvState.provisioning: frozenset({EnvState.ready, EnvState.stopped}),
    EnvState.ready: frozenset({EnvState.resetting, EnvState.stopped, EnvState.provisioning}),
    EnvState.resetting: frozenset({EnvState.ready, EnvState.stopped}),
    EnvState.stopped: frozenset({EnvState.provisioning, EnvState.pending}),
    EnvState.failed: frozenset({EnvState.provisioning, EnvState.pending, EnvState.stopped}),
}


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
class CheckRequest:
    """Run one step's checker per DESIGN's checker protocol.

    ``checker`` is the checker file on the server (taken from the lab folder, never from the
    workspace); it runs with ``/workspace/<lab_id>`` as working directory, read-only, with ``env``
    (the ``LAB_*`` variables) plus ``LAB_RESULT_FD`` pointing at the result channel."""

    lab_id: str
    step_id: str
    checker: Path
    env: Mapping[str, str]
    timeout_s: float = 60.0
    log_limit: int = 64 * 1024


@dataclass(frozen=True)
class CheckRaw:
    """What the backend saw; :mod:`labserver.checks` turns it into a verdict."""

    exit_code: int | None
    result: bytes  # everything written to the result channel (at most 1 MiB kept)
    log: bytes  # stdout+stderr interleaved, capped at log_limit
    log_truncated: bool
    timed_out: bool
    duration_s: float


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
    the first one can be held until the shell reads it (:class:`labserver.terminals.TerminalSession`).
    False: input goes to the PTY at once, and what is typed before the first prompt may show twice."""

    marks_prompt: bool

    async def read(self) -> bytes: ...

    async def write(self, data: bytes) -> None: ...

    async def resize(self, cols: int, rows: int) -> None: ...

    async def close(self) -> None: ...


ProgressCallback = Callable[[str, str], Awaitable[None]]  # (phase, message)


@runtime_checkable
class Backend(Protocol):
    name: str

    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef: ...

    async def status(self, ref: EnvRef) -> EnvStatus: ...

    async def exec(
        self,
        ref: EnvRef,
        argv: Sequence[str],
        *,
        timeout: float = 60.0,
        readonly: bool = False,
        cwd: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw: ...

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> Terminal: ...

    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]: ...

    async def read_file(self, ref: EnvRef, path: str) -> bytes: ...

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None: ...

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str: ...

    """Move ``/workspace/<lab>`` to ``/workspace/.backups/<backup_name>/<lab>`` and seed it again
    from the starter; returns the backup path (workspace-relative)."""

    async def archive(self, ref: EnvRef, path: str) -> bytes: ...

    """A zip of the folder ``path`` (workspace-relative)."""

    async def destroy(self, ref: EnvRef) -> None: ...

    async def discover(self) -> list[EnvRef]: ...


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
        parts.append(part)
    return "/".join(parts)


async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)
