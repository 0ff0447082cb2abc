"""The local backend: one workspace folder per environment on this machine, a real PTY shell,
checks in a separate process that sees the workspace read-only. The embedded default:
``labserver serve`` and ``labserver selfpaced`` need nothing else.

Threat model and mechanism: attendees run arbitrary code here, and the server may be root. Every
attendee process (shell, ``exec``, check) is sandboxed by :mod:`labserver.backends.sandbox` (an
unprivileged uid of the environment's own when the server is root, else the server's uid in a user
namespace; no capabilities; only the runtime, the workspace and, for a check, the checked lab without
its solution are visible), limited by :mod:`labserver.backends.limits` (pids, memory, CPU per
environment), and every file the server touches on an attendee's behalf goes through
:mod:`labserver.backends.local_files` (no path component can be swapped for a symlink). What this
machine actually gives is measured at start (:attr:`LocalBackend.isolation`, logged); without a
working sandbox the server admits attendees from other machines only when the operator says so
(``LABSERVER_ALLOW_UNSANDBOXED``, :func:`join_refusal`). docs/security.md has the whole picture and
the test behind each claim.

Trusted state lives outside the workspace, in ``DATA_DIR/sandbox/<env>/`` (never visible to
attendees): the environment's uid and limits and its ``/etc/passwd``. The marker file in the
workspace only says "a workspace lives here" (the attendee can change it; nothing trusts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import ipaddress
import json
import logging
import os
import pwd
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import ptyprocess

from labserver.backends import limits, sandbox
from labserver.backends.base import (
    PS1_PROMPT_END,
    CheckRaw,
    CheckRequest,
    EnvironmentGone,
    EnvRef,
    EnvSpec,
    EnvState,
    EnvStatus,
    ExecResult,
    FileEntry,
    LabSeed,
    PathRefused,
    ProgressCallback,
    ProvisionError,
    safe_relpath,
)
from labserver.backends.local_files import Workspace
from labserver.backends.local_terminal import RESULT_LIMIT, PtyTerminal, drain
from labserver.backends.local_zygote import ZygoteFailed, Zygotes, run_checker
from labserver.config import Settings

log = logging.getLogger(__name__)

MARKER = ".labserver-env.json"
HIDDEN = {MARKER, ".backups"}
SECRET_FOLDERS = ("solution", "mutants")  # of every lab: never visible to an attendee process
NOBODY = 65534


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Isolation:
    """What this machine gives attendee processes (measured when the backend starts)."""

    sandbox: str  # "bubblewrap" | "none"
    user: str  # who attendee processes are
    limits: str  # limits.Mechanism
    limits_detail: str
    problems: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        text = f"sandbox={self.sandbox}; user={self.user}; limits={self.limits}"
        if self.limits_detail:
            text += f" ({self.limits_detail})"
        return text


@dataclass(frozen=True)
class EnvRecord:
    """The trusted per-environment record in ``DATA_DIR/sandbox/<env>/identity.json``."""

    uid: int
    gid: int
    limits: limits.Limits


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def join_refusal(backend: object, client_host: str | None) -> str | None:
    """For the join route: None when an attendee connecting from ``client_host`` may join, else the
    reason (for people). Only a local backend without full isolation ever refuses, and only clients
    that are not on this machine, unless the operator set ``LABSERVER_ALLOW_UNSANDBOXED``."""
    if not isinstance(backend, LocalBackend):
        return None
    return backend.join_refusal(client_host)


def _fake_npu_env() -> dict[str, str]:
    """NPU mode without a card (tests of the labs' Ascend path, issue 31): with ``LABKIT_FAKE_NPU``
    set in the server's environment every lab process gets it, so each one that imports labkit has
    labkit's FAKE ``torch_npu`` (``labkit.npu_fake``), and environments say ``npu:0`` as a card's
    container does (``LAB_DEVICE``, ``ASCEND_RT_VISIBLE_DEVICES``). Unset: nothing."""
    fake = os.environ.get("LABKIT_FAKE_NPU", "").strip()
    if fake in ("", "0"):
        return {}
    return {"LABKIT_FAKE_NPU": fake, "ASCEND_RT_VISIBLE_DEVICES": "0"}


class LocalBackend:
    name = "local"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = settings.workspaces_dir
        self.state_dir = settings.data_dir / "sandbox"
        self.python = sys.executable
        self.switch = self._own_uids()
        self.setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        self.bwrap = sandbox.bwrap_path(settings.sandbox)
        instance = hashlib.sha256(str(self.root.absolute()).encode()).hexdigest()[:12]
        self.limiter = limits.detect(
            settings.local.limits, parent=settings.local.cgroup_parent, instance=instance
        )
        self._uid_lock = threading.Lock()
        self.zygotes = Zygotes(idle_s=settings.local.runner_idle_s)
        self._uids_used: set[int] | None = None  # read once by _allocate_uid, then kept
        self.isolation = self._measure()
        if self.isolation.complete:
            log.info("local backend isolation: %s", self.isolation.describe())
        else:
            log.warning(
                "local backend: INCOMPLETE ISOLATION (%s): %s. %s",
                self.isolation.describe(),
                "; ".join(self.isolation.problems),
                "Attendees from other machines are admitted (LABSERVER_ALLOW_UNSANDBOXED)."
                if settings.allow_unsandboxed
                else "Only attendees on this machine may join; set LABSERVER_ALLOW_UNSANDBOXED=1 to "
                "admit others anyway.",
            )

    # -- isolation ---------------------------------------------------------------------------
    def _own_uids(self) -> bool:
        """Whether each environment runs under a uid of its own: always when the server is root."""
        return os.geteuid() == 0

    def _measure(self) -> Isolation:
        problems: list[str] = []
        if self.switch and not os.access(self.setpriv, os.X_OK):
            problems.append("setpriv (util-linux) is missing, so attendee processes cannot leave root")
        # where workspaces live (their uid must reach that too), else a temporary folder: starting
        # a backend creates nothing (``labserver check`` runs one in any folder)
        if self.root.is_dir():
            probe_dir = self.root / f".probe-{os.getpid()}-{threading.get_ident()}"
            probe_dir.mkdir(exist_ok=True)
        else:
            probe_dir = Path(tempfile.mkdtemp(prefix="labserver-probe-"))
            probe_dir.chmod(0o755)
        try:
            who = sandbox.Identity(NOBODY, NOBODY, True) if self.switch else self._server_identity()
            if self.switch:
                os.chown(probe_dir, NOBODY, NOBODY)
            probe = [self.python, "-I", "-S", "-c", f"import os; os.listdir({str(probe_dir)!r})"]
            argv = sandbox.wrap(
                probe,
                bwrap=self.bwrap,
                view=sandbox.View(runtime=self._runtime(), writable=(probe_dir,)),
                identity=who,
                chdir=probe_dir,
                setpriv=self.setpriv,
            )
            failure = sandbox.works(argv)
            if self.bwrap and failure:
                if self.settings.sandbox == "bwrap":
                    raise RuntimeError(
                        f"LABSERVER_SANDBOX=bwrap but bubblewrap does not work here: {failure}"
                    )
                problems.append(f"bubblewrap does not work here ({failure})")
                self.bwrap = None
                failure = sandbox.works(
                    sandbox.wrap(
                        probe,
                        bwrap=None,
                        view=sandbox.View(),
                        identity=who,
                        chdir=probe_dir,
                        setpriv=self.setpriv,
                    )
                )
            if not self.bwrap:
                if self.settings.sandbox == "none":
                    problems.append("no sandbox (LABSERVER_SANDBOX=none)")
                elif not problems or "bubblewrap does not work" not in problems[-1]:
                    problems.append("bubblewrap is not installed (apt-get install bubblewrap)")
                if failure:
                    problems.append(f"attendee processes cannot run here as uid {who.uid}: {failure}")
        finally:
            with contextlib.suppress(OSError):
                probe_dir.rmdir()
        if self.limiter.name == "none":
            problems.append(f"no resource limits ({self.limiter.detail})")
        if self.switch:
            user = f"uid {self.settings.local.uid_base}+n, one per environment (server is root)"
        elif self.bwrap:
            user = f"the server's uid {os.getuid()} in a user namespace"
        else:
            user = f"the server's uid {os.getuid()}"
        return Isolation(
            "bubblewrap" if self.bwrap else "none",
            user,
            self.limiter.name,
            self.limiter.detail,
            tuple(problems),
        )

    def runtime_problem(self, uid: int, gid: int) -> str:
        """'' when processes of ``uid``/``gid`` can start this server's Python (the checkers' and
        labkit's); else what stops them. Only a root server without bubblewrap can meet one: the
        sandbox binds the runtime for them, and a server that is not root runs them as itself."""
        if self.bwrap or not self.switch:
            return ""
        return sandbox.unreachable(Path(self.python), uid, gid)

    def _checker_can_start(self, state: EnvRecord) -> None:
        if problem := self.runtime_problem(state.uid, state.gid):
            raise sandbox.CheckerCannotStart(f"{self.python}: {problem} (labserver doctor: runtime)")

    def join_refusal(self, client_host: str | None) -> str | None:
        if self.isolation.complete or self.settings.allow_unsandboxed or _is_loopback(client_host):
            return None
        return (
            "This server cannot isolate attendees from each other and from itself "
            f"({'; '.join(self.isolation.problems)}), so it only admits attendees on its own machine. "
            "The operator can install bubblewrap, or set LABSERVER_ALLOW_UNSANDBOXED=1 to accept the risk."
        )

    def _server_identity(self) -> sandbox.Identity:
        return sandbox.Identity(os.getuid(), os.getgid(), False)

    # -- trusted per-environment state -------------------------------------------------------------
    def _state_file(self, name: str) -> Path:
        return self.state_dir / name / "identity.json"

    def _read_state(self, name: str) -> EnvRecord | None:
        try:
            raw = json.loads(self._state_file(name).read_text())
            lim = limits.Limits(float(raw["cpus"]), int(raw["memory_mb"]), int(raw["pids"]))
            return EnvRecord(int(raw["uid"]), int(raw["gid"]), lim)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_state(self, name: str, state: EnvRecord) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)  # the server's only: attendees never see DATA_DIR anyway
        folder = self.state_dir / name
        folder.mkdir(exist_ok=True)
        body = {"uid": state.uid, "gid": state.gid, **state.limits.__dict__}
        tmp = folder / "identity.json.tmp"
        tmp.write_text(json.dumps(body))
        os.replace(tmp, folder / "identity.json")
        ws = self.root / name
        (folder / "passwd").write_text(
            "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
            f"lab:x:{state.uid}:{state.gid}:labserver attendee:{ws}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        )
        (folder / "group").write_text(f"root:x:0:\nlab:x:{state.gid}:\nnogroup:x:65534:\n")
        (folder / "hosts").write_text("127.0.0.1\tlocalhost lab\n::1\tlocalhost ip6-localhost ip6-loopback\n")

    def _allocate_uid(self) -> int:
        """The lowest uid of the range that no environment and no account of this machine has
        (call with ``_uid_lock`` held). The environments' uids are read from their records once,
        then kept (this server alone writes them; :meth:`destroy` gives a uid back): reading every
        record at each new environment made a room's joins O(n) each, under the lock every file
        operation and check of the room takes (the load rehearsal, issue 30)."""
        if self._uids_used is None:
            self._uids_used = set()
            if self.state_dir.is_dir():
                for child in self.state_dir.iterdir():
                    state = self._read_state(child.name)
                    if state is not None:
                        self._uids_used.add(state.uid)
        used = self._uids_used
        base = self.settings.local.uid_base
        for uid in range(base, base + self.settings.local.uid_count):
            if uid in used:
                continue
            try:
                pwd.getpwuid(uid)
            except KeyError:
                used.add(uid)
                return uid
        raise ProvisionError(
            "The server has no free user id for a new environment. Ask the instructor.",
            reason="capacity",
            log=f"all of LABSERVER_LOCAL__UID_BASE={base} + {self.settings.local.uid_count} are in use",
        )

    def _state(self, ws: Path, spec: EnvSpec | None = None) -> EnvRecord:
        """The environment's record, made (and the workspace given to its uid) on first use."""
        name = ws.name
        with self._uid_lock:
            state = self._read_state(name)
            fresh = state is None
            if state is None:
                if self.switch and ws.parent == self.root:
                    uid = self._allocate_uid()
                    state = EnvRecord(uid, uid, limits.Limits())
                elif self.switch:  # a folder of someone's (``labserver check``): nobody, read-only use
                    state = EnvRecord(NOBODY, NOBODY, limits.Limits())
                else:
                    state = EnvRecord(os.getuid(), os.getgid(), limits.Limits())
            if spec is not None:
                wanted = limits.Limits(spec.cpus, spec.memory_mb, spec.pids)
                if wanted != state.limits:
                    state = EnvRecord(state.uid, state.gid, wanted)
                    fresh = True
            if fresh and ws.parent == self.root:
                self._write_state(name, state)
                if self.switch and ws.is_dir():
                    self._files(ws, state).chown_tree()
            return state

    def _files(self, ws: Path, state: EnvRecord | None = None) -> Workspace:
        if not self.switch:
            return Workspace(ws, None, frozenset(HIDDEN))
        state = state or self._state(ws)
        return Workspace(ws, (state.uid, state.gid), frozenset(HIDDEN))

    def _identity(self, state: EnvRecord) -> sandbox.Identity:
        if self.switch:
            return sandbox.Identity(state.uid, state.gid, True)
        return self._server_identity()

    # -- helpers -----------------------------------------------------------------------------
    def _ws(self, ref: EnvRef) -> Path:
        ws = Path(ref.infra_id)
        if not _is_marker(ws):
            raise EnvironmentGone()
        return ws

    def _workdir(self, ws: Path, cwd: str) -> Path:
        """``ws/cwd`` if it is a folder reached without symlinks; else ``ws`` (terminals)."""
        rel = safe_relpath(cwd) if cwd else ""
        if rel and Workspace(ws).is_dir(rel):
            return ws / rel
        return ws

    def _base_env(self, ws: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        venv_bin = str(Path(self.python).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(ws),
            "USER": "lab",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "xterm-256color",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LABKIT_DEVICE": os.environ.get("LABKIT_DEVICE", ""),
            "LAB_WORKSPACE": str(ws),
            **_fake_npu_env(),
        }
        env = {k: v for k, v in env.items() if v}
        if extra:
            env.update(extra)
        return env

    def _runtime(self) -> tuple[Path, ...]:
        """Folders sandboxed processes import from (``/usr`` is bound anyway)."""
        return tuple(p for p in sandbox.runtime_paths() if not p.is_relative_to("/usr"))

    def _masked(self) -> tuple[Path, ...]:
        """What stays hidden even when it lies inside a bound folder (a checkout on sys.path)."""
        out = [self.settings.data_dir.absolute()]
        labs = self.settings.labs_dir
        if labs.is_dir():
            for lab in sorted(labs.iterdir()):
                out += [lab / name for name in SECRET_FOLDERS if (lab / name).is_dir()]
        return tuple(out)

    def _lab_files(self, checker: Path) -> tuple[Path, ...]:
        """What a check may read of its lab: the lab folder without ``solution/`` and ``mutants/``
        (the checkers' helpers read ``starter/`` and ``checks/``), or the checker's own folder when
        it is not in the labs folder."""
        labs = self.settings.labs_dir.resolve()
        if checker.is_relative_to(labs) and len(checker.relative_to(labs).parts) >= 2:
            lab = labs / checker.relative_to(labs).parts[0]
            return tuple(sorted(p for p in lab.iterdir() if p.name not in SECRET_FOLDERS))
        return (checker.parent,)

    def _view(
        self, ws: Path, state: EnvRecord, *, readonly: Sequence[Path] = (), ws_writable: bool
    ) -> sandbox.View:
        etc = self.state_dir / ws.name
        generated = tuple(
            (etc / name, name) for name in ("passwd", "group", "hosts") if (etc / name).is_file()
        )
        return sandbox.View(
            runtime=self._runtime(),
            readonly=(*readonly, *(() if ws_writable else (ws,))),
            writable=(ws,) if ws_writable else (),
            masked=self._masked(),
            etc=generated,
            tmp_mb=max(16, state.limits.memory_mb // 4),
        )

    def _command(
        self,
        argv: Sequence[str],
        ws: Path,
        state: EnvRecord,
        prefix: list[str],
        *,
        chdir: Path,
        readonly: Sequence[Path] = (),
        ws_writable: bool = True,
        new_session: bool = True,
    ) -> list[str]:
        return prefix + sandbox.wrap(
            argv,
            bwrap=self.bwrap,
            view=self._view(ws, state, readonly=readonly, ws_writable=ws_writable),
            identity=self._identity(state),
            chdir=chdir,
            network=False,
            new_session=new_session,
            setpriv=self.setpriv,
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        ws = self.root / spec.env_id
        try:
            if progress:
                await progress("creating", "Creating your workspace")
            ws.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(_write_marker, ws, spec)
            state = await asyncio.to_thread(self._state, ws, spec)
            if progress:
                await progress("seeding", "Copying the lab files")
            files = self._files(ws, state)
            for lab in spec.labs:
                await asyncio.to_thread(files.seed, lab.lab_id, lab.starter)
        except OSError as exc:
            raise ProvisionError(
                "Could not create your workspace on the server (disk full?). Ask the instructor.",
                reason="disk",
                log=repr(exc),
            ) from exc
        device = "npu:0" if _fake_npu_env() else "cpu-emu"
        return EnvRef(env_id=spec.env_id, backend=self.name, infra_id=str(ws), node="local", device=device)

    async def status(self, ref: EnvRef) -> EnvStatus:
        if _is_marker(Path(ref.infra_id)):
            return EnvStatus(EnvState.ready, node="local", device=ref.device)
        return EnvStatus(EnvState.stopped, "The workspace folder is gone.", node="local", device=ref.device)

    async def destroy(self, ref: EnvRef) -> None:
        ws = Path(ref.infra_id)
        if ws.parent.resolve() != self.root.resolve():
            return
        await self.zygotes.stop_env(ws.name)
        for group in (ws.name, f"{ws.name}.check"):
            await asyncio.to_thread(self.limiter.destroy, group)
        if ws.is_dir():
            await asyncio.to_thread(shutil.rmtree, ws, True)  # fd-based: never follows a symlink
        await asyncio.to_thread(self._forget_state, ws.name)

    def _forget_state(self, name: str) -> None:
        """Remove an environment's record and give its uid back (``_allocate_uid``)."""
        with self._uid_lock:
            state = self._read_state(name)
            shutil.rmtree(self.state_dir / name, True)
            if state is not None and self._uids_used is not None:
                self._uids_used.discard(state.uid)

    async def discover(self) -> list[EnvRef]:
        refs = []
        if self.root.is_dir():
            for child in sorted(self.root.iterdir()):
                if not _is_marker(child):
                    continue
                try:
                    env_id = json.loads(Workspace(child).read(MARKER))["env_id"]
                except (OSError, ValueError, KeyError, PathRefused, TypeError):
                    continue
                refs.append(EnvRef(env_id=env_id, backend=self.name, infra_id=str(child)))
        return refs

    # -- processes ---------------------------------------------------------------------------
    async def _acquire(self, group: str, state: EnvRecord) -> list[str]:
        return await asyncio.to_thread(self.limiter.acquire, group, state.limits, own_uid=self.switch)

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
        ws = self._ws(ref)
        workdir = self._workdir(ws, cwd)
        if cwd and workdir == ws and safe_relpath(cwd):
            raise FileNotFoundError(cwd)
        if readonly and not self.bwrap:
            raise EnvironmentGone(
                "Read-only execution needs bubblewrap (apt-get install bubblewrap).", reason="sandbox"
            )
        state = await asyncio.to_thread(self._state, ws)
        prefix = await self._acquire(ws.name, state)
        try:
            cmd = self._command(argv, ws, state, prefix, chdir=workdir, ws_writable=not readonly)
            start = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                cwd="/" if self.bwrap else workdir,
                env=self._base_env(ws, env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout)
                return ExecResult(proc.returncode, out, err, False, time.monotonic() - start)
            except TimeoutError:
                _kill_group(proc.pid)
                out, err = await proc.communicate()
                return ExecResult(None, out, err, True, time.monotonic() - start)
        finally:
            await asyncio.to_thread(self.limiter.release, ws.name)

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        ws = self._ws(ref)
        lab_rel = safe_relpath(request.lab_id)
        if not lab_rel or not Workspace(ws).is_dir(lab_rel):
            raise EnvironmentGone(
                f"The lab folder {request.lab_id}/ is missing; reset the lab to get it back.",
                reason="lab-missing",
            )
        lab_dir = ws / lab_rel
        state = await asyncio.to_thread(self._state, ws)
        self._checker_can_start(state)
        checker = request.checker.resolve()
        env = self._base_env(ws, request.env)
        env["LAB_DIR"] = str(lab_dir)
        if self.settings.local.check_runner == "zygote":
            try:
                zyg = await self.zygotes.get(
                    (ws.name, lab_rel),
                    functools.partial(self._start_zygote, ws, lab_dir, state, checker),
                    self.python,
                )
            except ZygoteFailed as exc:
                log.warning("environment %s: %s; running the checker in a process of its own", ws.name, exc)
            else:
                return await run_checker(zyg, lab_dir, checker, env, request)
        group = f"{ws.name}.check"
        prefix = await self._acquire(group, state)
        try:
            return await self._run_check(ws, lab_dir, state, checker, prefix, env, request)
        finally:
            await asyncio.to_thread(self.limiter.release, group)

    async def _start_zygote(
        self, ws: Path, lab_dir: Path, state: EnvRecord, checker: Path, argv: list[str], fd: int
    ) -> tuple[asyncio.subprocess.Process, Callable[[], Awaitable[None]]]:
        """Start an environment's check runner (local_zygote.py) in the check sandbox."""
        group = f"{ws.name}.check"
        prefix = await self._acquire(group, state)

        async def release() -> None:
            await asyncio.to_thread(self.limiter.release, group)

        cmd = self._command(
            argv, ws, state, prefix, chdir=lab_dir, readonly=self._lab_files(checker), ws_writable=False
        )
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with open(self.state_dir / f"{ws.name}.runner.log", "ab") as errors:
                proc = await asyncio.create_subprocess_exec(
                    *cmd,
                    cwd="/" if self.bwrap else lab_dir,
                    env=self._base_env(ws),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=errors,
                    pass_fds=(fd,),
                    start_new_session=True,
                )
        except BaseException:
            await release()
            raise
        return proc, release

    async def _run_check(
        self,
        ws: Path,
        lab_dir: Path,
        state: EnvRecord,
        checker: Path,
        prefix: list[str],
        env: dict[str, str],
        request: CheckRequest,
    ) -> CheckRaw:
        read_fd, write_fd = os.pipe()
        env = dict(env, LAB_RESULT_FD=str(write_fd))
        argv = [self.python, "-I", str(checker)]
        cmd = self._command(
            argv, ws, state, prefix, chdir=lab_dir, readonly=self._lab_files(checker), ws_writable=False
        )
        start = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                cwd="/" if self.bwrap else lab_dir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        if request.meter is not None:
            request.meter.attach(proc.pid)  # base.CheckMeter: the check is this process and its own
        log_buf = bytearray()
        truncated = False

        async def pump_log() -> None:
            nonlocal truncated
            assert proc.stdout is not None
            while True:
                chunk = await proc.stdout.read(65536)
                if not chunk:
                    return
                room = request.log_limit - len(log_buf)
                if room > 0:
                    log_buf.extend(chunk[:room])
                if len(chunk) > max(room, 0):
                    truncated = True

        result_task = asyncio.ensure_future(drain(read_fd, RESULT_LIMIT))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.gather(pump_log(), proc.wait()), request.timeout_s)
        except TimeoutError:
            timed_out = True
            if request.meter is not None:
                request.meter.sample()  # what the check used, read before the kill (timeouts.blame)
            _kill_group(proc.pid)
            await proc.wait()
        # children that kept the result pipe open (daemonized attendee code) must not hang us
        try:
            await asyncio.wait_for(asyncio.shield(result_task), 2.0)
        except TimeoutError:
            _kill_group(proc.pid)
            await asyncio.wait_for(result_task, 5.0)
        return CheckRaw(
            exit_code=None if timed_out else proc.returncode,
            result=result_task.result()[0],
            log=bytes(log_buf),
            log_truncated=truncated,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
        )

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> PtyTerminal:
        ws = self._ws(ref)
        workdir = self._workdir(ws, cwd)
        state = await asyncio.to_thread(self._state, ws)
        env = self._base_env(ws, {"PS1": r"\W$ " + PS1_PROMPT_END, "PROMPT_COMMAND": ""})
        prefix = await self._acquire(ws.name, state)
        argv = self._command(
            ["bash", "--noprofile", "--norc", "-i"], ws, state, prefix, chdir=workdir, new_session=False
        )
        try:
            proc = await asyncio.to_thread(
                ptyprocess.PtyProcess.spawn,
                argv,
                cwd="/" if self.bwrap else str(workdir),
                env=env,
                dimensions=(max(2, rows), max(2, cols)),
            )
        except BaseException:
            await asyncio.to_thread(self.limiter.release, ws.name)
            raise
        return PtyTerminal(proc, on_end=lambda: self.limiter.release(ws.name))

    # -- files (local_files: no path component can be swapped for a symlink) ----------------------
    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]:
        files = self._files(self._ws(ref))
        return await asyncio.to_thread(files.listing, path)

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        files = self._files(self._ws(ref))
        return await asyncio.to_thread(files.read, path)

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        files = self._files(self._ws(ref))
        await asyncio.to_thread(files.write, path, data)

    async def delete_file(self, ref: EnvRef, path: str) -> None:
        """Remove a file or folder of the workspace (a symlink is removed, never followed)."""
        files = self._files(self._ws(ref))
        await asyncio.to_thread(files.delete, path)

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        files = self._files(self._ws(ref))
        backup = await asyncio.to_thread(files.move_to_backup, lab.lab_id, backup_name)
        await asyncio.to_thread(files.seed, lab.lab_id, lab.starter)
        return backup or f".backups/{safe_relpath(backup_name)}/{lab.lab_id}"

    async def aclose(self) -> None:
        """Stop the check runners (they would end with the server anyway: their channel closes)."""
        await self.zygotes.close()

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        files = self._files(self._ws(ref))
        rel = safe_relpath(path)
        return await asyncio.to_thread(files.zip, rel, rel.rsplit("/", 1)[-1] or "workspace")


def _is_marker(ws: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(ws / MARKER, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _write_marker(ws: Path, spec: EnvSpec) -> None:
    """Create the marker unless something (file or symlink) is there already; never follows one."""
    body = json.dumps({"env_id": spec.env_id, "event_id": spec.event_id, "attendee_id": spec.attendee_id})
    dfd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(
            MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd
        )
    except FileExistsError:
        return
    finally:
        os.close(dfd)
    with os.fdopen(fd, "w") as f:
        f.write(body)
