"""The local backend: one workspace folder per environment on this machine, a real PTY shell,
checks in a separate (bubblewrap-sandboxed where available) process that sees the workspace
read-only. The embedded default: ``labserver serve`` and ``labserver selfpaced`` need nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import secrets
import shutil
import signal
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import ptyprocess

from labserver.backends import sandbox
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
from labserver.config import Settings

MARKER = ".labserver-env.json"
RESULT_LIMIT = 1024 * 1024
HIDDEN = {MARKER, ".backups"}


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def seed_lab(root: Path, lab: LabSeed) -> None:
    target = root / lab.lab_id
    if target.exists():
        return
    if lab.starter.is_dir():
        shutil.copytree(lab.starter, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        target.mkdir(parents=True)


def zip_folder(folder: Path, arc_root: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or "__pycache__" in path.parts:
                continue
            if path.is_file():
                zf.write(path, f"{arc_root}/{path.relative_to(folder).as_posix()}")
    return buf.getvalue()


class PtyTerminal:
    """A bash on a PTY. ``read`` waits for output; b"" means the shell exited."""

    marks_prompt = True  # LocalBackend.terminal starts bash with PS1 ending in PS1_PROMPT_END

    def __init__(self, proc: ptyprocess.PtyProcess) -> None:
        self.proc = proc
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._loop.add_reader(proc.fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = os.read(self.proc.fd, 65536)
        except OSError:
            data = b""
        if not data:
            self._loop.remove_reader(self.proc.fd)
        self._queue.put_nowait(data)

    async def read(self) -> bytes:
        if self._closed and self._queue.empty():
            return b""
        return await self._queue.get()

    async def write(self, data: bytes) -> None:
        if not self._closed:
            await asyncio.to_thread(os.write, self.proc.fd, data)

    async def resize(self, cols: int, rows: int) -> None:
        if not self._closed:
            self.proc.setwinsize(max(2, min(rows, 500)), max(2, min(cols, 1000)))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.proc.fd)
        sid = self.proc.pid
        await asyncio.to_thread(self.proc.close, True)
        # jobs that ignored SIGHUP stay in bash's session: end them too
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == sid:
                        os.kill(int(entry), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self._queue.put_nowait(b"")

    @property
    def pid(self) -> int:
        return int(self.proc.pid)


class LocalBackend:
    name = "local"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = settings.workspaces_dir
        self.bwrap = sandbox.bwrap_path(settings.sandbox)
        self.python = sys.executable

    # -- helpers -----------------------------------------------------------------------------
    def _ws(self, ref: EnvRef) -> Path:
        ws = Path(ref.infra_id)
        if not (ws / MARKER).is_file():
            raise EnvironmentGone()
        return ws

    def _resolve(self, ref: EnvRef, path: str, *, must_exist: bool = False) -> Path:
        ws = self._ws(ref)
        rel = safe_relpath(path)
        target = ws / rel
        # refuse symlinks that lead out of the workspace
        resolved = target.resolve()
        if not resolved.is_relative_to(ws.resolve()):
            raise PathRefused(path)
        if must_exist and not target.exists():
            raise FileNotFoundError(path)
        return target

    def _base_env(self, ws: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        venv_bin = str(Path(self.python).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(ws),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "xterm-256color",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LABKIT_DEVICE": os.environ.get("LABKIT_DEVICE", ""),
            "LAB_WORKSPACE": str(ws),
        }
        env = {k: v for k, v in env.items() if v}
        if extra:
            env.update(extra)
        return env

    def _hidden(self) -> list[Path]:
        data = self.settings.data_dir.resolve()
        return [data] if data != Path("/") else []

    def _runtime(self) -> list[Path]:
        """Folders sandboxed processes need to see (a venv or labs under /tmp would vanish)."""
        return [*sandbox.runtime_paths(), self.settings.labs_dir]

    # -- lifecycle -------------------------------------------------------------------------
    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        ws = self.root / spec.env_id
        try:
            if progress:
                await progress("creating", "Creating your workspace")
            ws.mkdir(parents=True, exist_ok=True)
            marker = ws / MARKER
            if not marker.exists():
                marker.write_text(
                    json.dumps(
                        {"env_id": spec.env_id, "event_id": spec.event_id, "attendee_id": spec.attendee_id}
                    )
                )
            if progress:
                await progress("seeding", "Copying the lab files")
            for lab in spec.labs:
                await asyncio.to_thread(seed_lab, ws, lab)
        except OSError as exc:
            raise ProvisionError(
                "Could not create your workspace on the server (disk full?). Ask the instructor.",
                reason="disk",
                log=repr(exc),
            ) from exc
        return EnvRef(env_id=spec.env_id, backend=self.name, infra_id=str(ws), node="local", device="cpu-emu")

    async def status(self, ref: EnvRef) -> EnvStatus:
        if (Path(ref.infra_id) / MARKER).is_file():
            return EnvStatus(EnvState.ready, node="local", device=ref.device)
        return EnvStatus(EnvState.stopped, "The workspace folder is gone.", node="local", device=ref.device)

    async def destroy(self, ref: EnvRef) -> None:
        ws = Path(ref.infra_id)
        if ws.is_dir() and ws.resolve().is_relative_to(self.root.resolve()):
            await asyncio.to_thread(shutil.rmtree, ws, True)

    async def discover(self) -> list[EnvRef]:
        refs = []
        if self.root.is_dir():
            for child in sorted(self.root.iterdir()):
                marker = child / MARKER
                if marker.is_file():
                    try:
                        env_id = json.loads(marker.read_text())["env_id"]
                    except (ValueError, KeyError):
                        continue
                    refs.append(EnvRef(env_id=env_id, backend=self.name, infra_id=str(child)))
        return refs

    # -- processes ---------------------------------------------------------------------------
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
        workdir = self._resolve(ref, cwd) if cwd else ws
        cmd = sandbox.wrap(
            argv,
            bwrap=self.bwrap,
            hide=self._hidden(),
            keep=self._runtime(),
            writable=[] if readonly else [ws],
            readonly=[ws] if readonly else [],
            chdir=workdir,
        )
        if readonly and not self.bwrap:
            raise EnvironmentGone(
                "Read-only execution needs bubblewrap (apt-get install bubblewrap).", reason="sandbox"
            )
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            cwd=workdir,
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

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        ws = self._ws(ref)
        lab_dir = self._resolve(ref, request.lab_id)
        if not lab_dir.is_dir():
            raise EnvironmentGone(
                f"The lab folder {request.lab_id}/ is missing; reset the lab to get it back.",
                reason="lab-missing",
            )
        read_fd, write_fd = os.pipe()
        env = self._base_env(ws, request.env)
        env["LAB_RESULT_FD"] = str(write_fd)
        env["LAB_DIR"] = str(lab_dir)
        checker = request.checker.resolve()
        argv = [self.python, "-I", str(checker)]
        # the checker's folder is bound explicitly: labs may live under /tmp, which the sandbox replaces
        cmd = sandbox.wrap(
            argv,
            bwrap=self.bwrap,
            hide=self._hidden(),
            keep=self._runtime(),
            writable=[],
            readonly=[ws, checker.parent],
            chdir=lab_dir,
        )
        start = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                cwd=lab_dir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        loop = asyncio.get_running_loop()
        result = bytearray()
        log = bytearray()
        truncated = False

        async def pump_result() -> None:
            reader = await asyncio.to_thread(os.fdopen, read_fd, "rb", 0)
            try:
                while True:
                    chunk = await loop.run_in_executor(None, reader.read, 65536)
                    if not chunk:
                        return
                    if len(result) < RESULT_LIMIT:
                        result.extend(chunk[: RESULT_LIMIT - len(result)])
            finally:
                reader.close()

        async def pump_log() -> None:
            nonlocal truncated
            assert proc.stdout is not None
            while True:
                chunk = await proc.stdout.read(65536)
                if not chunk:
                    return
                room = request.log_limit - len(log)
                if room > 0:
                    log.extend(chunk[:room])
                if len(chunk) > max(room, 0):
                    truncated = True

        result_task = asyncio.ensure_future(pump_result())
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.gather(pump_log(), proc.wait()), request.timeout_s)
        except TimeoutError:
            timed_out = True
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
            result=bytes(result),
            log=bytes(log),
            log_truncated=truncated,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
        )

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> PtyTerminal:
        ws = self._ws(ref)
        workdir = self._resolve(ref, cwd) if cwd else ws
        if not workdir.is_dir():
            workdir = ws
        env = self._base_env(ws, {"PS1": r"\W$ " + PS1_PROMPT_END, "PROMPT_COMMAND": ""})
        argv = sandbox.wrap(
            ["bash", "--noprofile", "--norc", "-i"],
            bwrap=self.bwrap,
            hide=self._hidden(),
            keep=self._runtime(),
            writable=[ws],
            chdir=workdir,
            network=False,
            new_session=False,
        )
        proc = await asyncio.to_thread(
            ptyprocess.PtyProcess.spawn,
            argv,
            cwd=str(workdir),
            env=env,
            dimensions=(max(2, rows), max(2, cols)),
        )
        return PtyTerminal(proc)

    # -- files -----------------------------------------------------------------------------
    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]:
        base = self._resolve(ref, path, must_exist=True)
        ws = self._ws(ref)
        entries = []
        for item in sorted(base.rglob("*")):
            rel = item.relative_to(ws)
            if (
                any(part in HIDDEN or part == "__pycache__" for part in rel.parts)
                or item.is_symlink()
                or item.name.endswith(".saving")
            ):
                continue
            st = item.stat()
            entries.append(
                FileEntry(rel.as_posix(), item.is_dir(), 0 if item.is_dir() else st.st_size, st.st_mtime)
            )
            if len(entries) >= 5000:
                break
        return entries

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        target = self._resolve(ref, path, must_exist=True)
        if target.is_dir():
            raise IsADirectoryError(path)
        return await asyncio.to_thread(target.read_bytes)

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        target = self._resolve(ref, path)
        if target.name in HIDDEN:
            raise PathRefused(path)

        def _write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            # a name of its own per write: two saves of one file at once must not share a temp file
            tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.saving")
            tmp.write_bytes(data)
            os.replace(tmp, target)  # never a half-written file

        await asyncio.to_thread(_write)

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        ws = self._ws(ref)
        current = ws / safe_relpath(lab.lab_id)
        backup_rel = f".backups/{safe_relpath(backup_name)}/{lab.lab_id}"
        if current.exists():
            dest = ws / backup_rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(shutil.move, str(current), str(dest))
        await asyncio.to_thread(seed_lab, ws, lab)
        return backup_rel

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        folder = self._resolve(ref, path, must_exist=True)
        return await asyncio.to_thread(zip_folder, folder, folder.name or "workspace")
