"""The backend contract (``labserver/backends/base.py``): every backend passes all of it."""

from __future__ import annotations

import asyncio
import io
import zipfile
from pathlib import Path

import pytest

from labserver.backends.base import (
    PROMPT_END,
    Backend,
    CheckRequest,
    EnvironmentGone,
    EnvSpec,
    EnvState,
    LabSeed,
    PathRefused,
    Stoppable,
    Terminal,
    TransitionRefused,
    check_transition,
)
from labserver.checks.verdict import interpret
from labserver.models import CheckStatus


def make_starter(tmp_path: Path) -> Path:
    starter = tmp_path / "starter"
    (starter / "pkg").mkdir(parents=True, exist_ok=True)
    (starter / "hello.py").write_text("print('hello from starter')\n")
    (starter / "pkg" / "data.txt").write_text("data\n")
    return starter


def spec_for(tmp_path: Path, env_id: str = "ev1-at1") -> EnvSpec:
    return EnvSpec(
        env_id=env_id,
        event_id=1,
        attendee_id=1,
        labs=(LabSeed("demo", make_starter(tmp_path)),),
        cpus=1.0,
        memory_mb=1024,
    )


def write_checker(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "checks" / "check.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    return path


CHECKER_FILE_EXISTS = """
import json, os, sys
ok = os.path.exists("answer.txt") and open("answer.txt").read().strip() == "42"
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": ok, "message": "answer ok" if ok else "answer.txt must hold 42", "hints": [], "metrics": {"lab_step": 1}}).encode())
print("checker log line")
sys.exit(0 if ok else 1)
"""


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_create_is_idempotent_and_seeds_starter(backend: Backend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        await backend.write_file(ref, "demo/mine.txt", b"keep me")
        again = await backend.create(spec_for(tmp_path))
        assert again.env_id == ref.env_id
        assert await backend.read_file(again, "demo/hello.py") == b"print('hello from starter')\n"
        assert await backend.read_file(again, "demo/mine.txt") == b"keep me"  # not re-seeded
        assert (await backend.status(again)).state == EnvState.ready
        await backend.destroy(again)

    run(go())


def test_progress_callback_is_called(backend: Backend, tmp_path: Path) -> None:
    phases: list[str] = []

    async def progress(phase: str, message: str) -> None:
        phases.append(phase)

    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path), progress)
        await backend.destroy(ref)

    run(go())
    assert phases, "create() must report its phases"


def test_files_roundtrip_list_and_refuse_traversal(backend: Backend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        await backend.write_file(ref, "demo/sub/new.py", "x = '你好'\n".encode())
        assert (await backend.read_file(ref, "demo/sub/new.py")).decode() == "x = '你好'\n"
        paths = {e.path for e in await backend.list_files(ref, "demo")}
        assert {"demo/hello.py", "demo/pkg/data.txt", "demo/sub/new.py"} <= paths
        for bad in ("../outside.txt", "/etc/passwd", "demo/../../x", "demo/\x00"):
            with pytest.raises(PathRefused):
                await backend.read_file(ref, bad)
            with pytest.raises(PathRefused):
                await backend.write_file(ref, bad, b"x")
        with pytest.raises(FileNotFoundError):
            await backend.read_file(ref, "demo/nope.txt")
        await backend.destroy(ref)

    run(go())


def test_symlink_out_of_the_workspace_is_refused(backend: Backend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        res = await backend.exec(ref, ["ln", "-s", "/etc/hostname", "demo/link"], cwd="")
        assert res.exit_code == 0, res.stderr
        with pytest.raises(PathRefused):
            await backend.read_file(ref, "demo/link")
        await backend.destroy(ref)

    run(go())


def test_exec_runs_in_the_workspace_with_timeout(backend: Backend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        res = await backend.exec(ref, ["python", "hello.py"], cwd="demo")
        assert res.exit_code == 0 and b"hello from starter" in res.stdout
        res = await backend.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (res.exit_code, res.stdout.strip(), res.stderr.strip()) == (3, b"out", b"err")
        res = await backend.exec(ref, ["sleep", "30"], timeout=1)
        assert res.timed_out and res.exit_code is None
        await backend.destroy(ref)

    run(go())


def test_terminal_is_a_real_pty_with_resize(backend: Backend, tmp_path: Path) -> None:
    async def read_until(term: Terminal, needle: bytes, timeout: float = 20) -> bytes:
        buf = b""

        async def loop() -> bytes:
            nonlocal buf
            while needle not in buf:
                chunk = await term.read()
                if not chunk:
                    break
                buf += chunk
            return buf

        return await asyncio.wait_for(loop(), timeout)

    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        term = await backend.terminal(ref, 80, 24, cwd="demo")
        if term.marks_prompt:  # then the session holds early input until this mark
            assert (await read_until(term, PROMPT_END)).endswith(PROMPT_END)
        await term.write(b"tty -s && echo IS-A-TTY-$((6*7))\r")
        assert b"IS-A-TTY-42" in await read_until(term, b"IS-A-TTY-42")
        await term.resize(123, 41)
        await term.write(b"stty size\r")
        assert b"41 123" in await read_until(term, b"41 123")
        await term.write(b"cat hello.py\r")
        assert b"hello from starter" in await read_until(term, b"hello from starter")
        await term.write(b"exit\r")
        await term.close()
        await backend.destroy(ref)

    run(go())


def test_check_verdict_comes_from_result_channel(backend: Backend, tmp_path: Path) -> None:
    checker = write_checker(tmp_path, CHECKER_FILE_EXISTS)

    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        req = CheckRequest(
            lab_id="demo",
            step_id="s1",
            checker=checker,
            env={"LAB_ID": "demo", "LAB_STEP": "s1"},
            timeout_s=60,
        )
        raw = await backend.run_check(ref, req)
        verdict = interpret(raw, 60)
        assert verdict.status == CheckStatus.failed, (verdict, raw)
        assert "must hold 42" in verdict.message
        assert b"checker log line" in raw.log
        await backend.write_file(ref, "demo/answer.txt", b"42\n")
        verdict = interpret(await backend.run_check(ref, req), 60)
        assert verdict.status == CheckStatus.passed and verdict.metrics == {"lab_step": 1.0}
        await backend.destroy(ref)

    run(go())


def test_check_cannot_write_the_workspace(backend_name: str, backend: Backend, tmp_path: Path) -> None:
    # documented (docs/backends.md): without bubblewrap the local backend cannot make the workspace
    # read-only during checks; that variant must show exactly that
    readonly = backend_name != "local-nosandbox"
    checker = write_checker(
        tmp_path,
        """
import json, os, sys
try:
    open("answer.txt", "w").write("42")
    wrote = True
except OSError:
    wrote = False
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": not wrote, "message": "wrote" if wrote else "read-only"}).encode())
sys.exit(0 if not wrote else 1)
""",
    )

    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        raw = await backend.run_check(ref, CheckRequest(lab_id="demo", step_id="s", checker=checker, env={}))
        verdict = interpret(raw, 60)
        if readonly:
            assert verdict.status == CheckStatus.passed, verdict.message
            with pytest.raises(FileNotFoundError):
                await backend.read_file(ref, "demo/answer.txt")
        else:
            assert verdict.status == CheckStatus.failed and verdict.message == "wrote"
        await backend.destroy(ref)

    run(go())


def test_destroy_twice_and_gone_env_raise_cleanly(backend: Backend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        await backend.destroy(ref)
        await backend.destroy(ref)  # already gone: success
        assert (await backend.status(ref)).state in (EnvState.stopped, EnvState.failed)
        with pytest.raises(EnvironmentGone):
            await backend.read_file(ref, "demo/hello.py")
        with pytest.raises(EnvironmentGone):
            await backend.exec(ref, ["true"])

    run(go())


def test_discover_finds_environments_after_restart(backend_name: str, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.backends.conftest import BACKEND_FACTORIES

    async def go() -> None:
        first = BACKEND_FACTORIES[backend_name](settings, tmp_path)
        ref = await first.create(spec_for(tmp_path, "ev1-at7"))
        await first.write_file(ref, "demo/state.txt", b"survives")
        second = BACKEND_FACTORIES[backend_name](settings, tmp_path)  # a "restarted server"
        found = {r.env_id: r for r in await second.discover()}
        assert "ev1-at7" in found
        assert await second.read_file(found["ev1-at7"], "demo/state.txt") == b"survives"
        await second.destroy(found["ev1-at7"])

    run(go())


def test_reset_lab_keeps_a_backup_and_archive_zips(backend: Backend, tmp_path: Path) -> None:
    spec = spec_for(tmp_path)

    async def go() -> None:
        ref = await backend.create(spec)
        await backend.write_file(ref, "demo/hello.py", b"print('edited')\n")
        backup = await backend.reset_lab(ref, spec.labs[0], "20260101-090000")
        assert await backend.read_file(ref, "demo/hello.py") == b"print('hello from starter')\n"
        assert await backend.read_file(ref, f"{backup}/hello.py") == b"print('edited')\n"
        data = await backend.archive(ref, "demo")
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        assert "demo/hello.py" in names and "demo/pkg/data.txt" in names
        await backend.destroy(ref)

    run(go())


def test_python_is_the_lab_python(backend: Backend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        res = await backend.exec(
            ref, ["python", "-c", "import labkit, sys; print('labkit-ok', sys.version_info[:2])"]
        )
        assert b"labkit-ok" in res.stdout, res.stderr
        await backend.destroy(ref)

    run(go())


def test_concurrent_writes_of_one_file_all_succeed(backend: Backend, tmp_path: Path) -> None:
    """Ctrl+S twice, or Ctrl+S and the Save button: two saves of one file at once."""

    async def go() -> None:
        ref = await backend.create(spec_for(tmp_path))
        bodies = [f"version {i}\n".encode() for i in range(8)]
        await asyncio.gather(*(backend.write_file(ref, "demo/notes/same.txt", b) for b in bodies))
        assert await backend.read_file(ref, "demo/notes/same.txt") in bodies
        names = {e.path for e in await backend.list_files(ref, "demo")}
        assert not any(n.endswith(".saving") for n in names), names
        await backend.destroy(ref)

    run(go())


def test_states_follow_the_allowed_transitions(backend: Backend, tmp_path: Path) -> None:
    """The states a backend reports through a whole lifecycle (create, poll, stop when it can,
    create again, destroy, poll) are each an allowed step from the one before, as the server stores
    them (``set_state`` -> ``check_transition``); and a step TRANSITIONS forbids is refused."""
    env_id = "ev1-at3"
    seen = [EnvState.pending]

    def store(state: EnvState) -> None:
        check_transition(env_id, seen[-1], state)  # raises TransitionRefused when not allowed
        seen.append(state)

    async def go() -> None:
        store(EnvState.provisioning)
        ref = await backend.create(spec_for(tmp_path, env_id))
        store(EnvState.ready)
        store((await backend.status(ref)).state)
        if isinstance(backend, Stoppable):
            await backend.stop(ref)
            store((await backend.status(ref)).state)
            store(EnvState.provisioning)
            ref = await backend.create(spec_for(tmp_path, env_id))
            store(EnvState.ready)
            assert await backend.read_file(ref, "demo/hello.py")
        await backend.destroy(ref)
        store((await backend.status(ref)).state)

    run(go())
    assert seen[-1] in (EnvState.stopped, EnvState.failed), seen
    with pytest.raises(TransitionRefused, match="ready -> pending"):
        check_transition(env_id, EnvState.ready, EnvState.pending)
