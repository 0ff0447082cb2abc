"""Exec, terminals, files and grader pods of the Kubernetes backend, for real against the fake API
server's exec WebSocket (``fake_api.py`` + ``fake_kubelet.py``: commands run as local processes in
each pod's sandboxed file system; no cluster can run here). The contract suite runs the same
backend too (``kubernetes-fake_api``); these go where the contract does not: both exec protocols,
hostile paths, a pod that is not running, the workspace across pod deletion, getting-started's
first step in the grader pod with a valid and a forged record, thirty execs at once."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from labserver.backends.base import (
    CheckRequest,
    EnvironmentGone,
    EnvRef,
    EnvSpec,
    LabSeed,
    PathRefused,
    Terminal,
)
from labserver.backends.kubernetes import manifests as km
from labserver.backends.kubernetes.backend import KubernetesBackend
from labserver.backends.kubernetes.grader_boot import MARK
from labserver.checks.verdict import interpret
from labserver.config import Settings
from labserver.models import CheckStatus
from tests.backends.kubernetes import fake_api
from tests.backends.kubernetes.fake_api import FakeCluster
from tests.conftest import REPO

GETTING_STARTED = REPO / "labs" / "getting-started"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    c = FakeCluster(tmp_path / "cluster")
    yield c
    c.close()


@pytest.fixture
def backend(settings: Settings, cluster: FakeCluster) -> Iterator[KubernetesBackend]:
    cfg = settings.kubernetes.model_copy(update={"namespace": "t", "api_attempts": 3})
    b = KubernetesBackend(
        settings.model_copy(update={"kubernetes": cfg}), configuration=cluster.configuration()
    )
    b.poll_s = 0.02
    yield b
    b.api.close()


def starter(tmp_path: Path) -> Path:
    root = tmp_path / "starter"
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "hello.py").write_text("print('hello from starter')\n")
    (root / "pkg" / "data.txt").write_text("data\n")
    return root


def spec(tmp_path: Path, env_id: str = "ev1-at1", labs: tuple[LabSeed, ...] | None = None) -> EnvSpec:
    return EnvSpec(
        env_id=env_id,
        event_id=1,
        attendee_id=1,
        labs=labs if labs is not None else (LabSeed("demo", starter(tmp_path)),),
        cpus=1.0,
        memory_mb=1024,
    )


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.mark.parametrize("protocol", ["v5.channel.k8s.io", "v4.channel.k8s.io"])
def test_fake_api_exec_channels_exit_codes_stdin_and_timeout(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path, protocol: str
) -> None:
    cluster.exec_protocols = (protocol,)

    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        res = await backend.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (res.exit_code, res.stdout, res.stderr) == (3, b"out\n", b"err\n")
        res = await backend.exec(
            ref, ["sh", "-c", "pwd; id -u; echo $HOME; touch /etc/x 2>&1 || true"], cwd="demo"
        )
        lines = res.stdout.decode().splitlines()
        assert lines[:3] == ["/workspace/demo", "1000", "/home/lab"] and "Read-only" in lines[3], lines
        res = await backend.exec(ref, ["no-such-program"])
        assert res.exit_code == 127 and b"no-such-program" in res.stderr
        big = bytes(range(256)) * 8192  # 2 MiB of every byte value: stdin and stdout over many frames
        await backend.write_file(ref, "demo/big.bin", big)
        assert await backend.read_file(ref, "demo/big.bin") == big
        res = await backend.exec(ref, ["sleep", "30"], timeout=1)
        assert res.timed_out and res.exit_code is None

    run(go())
    assert cluster.kubelet.execs >= 6


def test_fake_api_terminal_session_with_resize_ends_when_the_pod_goes(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    async def read_until(term: Terminal, needle: bytes) -> bytes:
        buf = b""

        async def loop() -> bytes:
            nonlocal buf
            while needle not in buf:
                chunk = await term.read()
                if not chunk:
                    break
                buf += chunk
            return buf

        return await asyncio.wait_for(loop(), 20)

    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        term = await backend.terminal(ref, 100, 30, cwd="demo")
        await term.write(b"stty size; pwd; tty -s && echo IS-A-$((6*7))-TTY\r")
        out = await read_until(term, b"IS-A-42-TTY")
        assert b"30 100" in out and b"/workspace/demo" in out, out
        await term.resize(123, 41)
        await term.write(b"stty size\r")
        assert b"41 123" in await read_until(term, b"41 123")
        await term.write(b"echo $((6*7))-from-$TERM\r")
        assert b"42-from-xterm-256color" in await read_until(term, b"42-from-xterm-256color")
        await term.write(b"sleep 300\r")
        await backend.stop(ref)  # the pod is deleted under the open terminal
        await read_until(term, b"\0never")  # ends (b"") instead of hanging
        assert await term.read() == b""
        await term.close()

    run(go())


def test_fake_api_files_refuse_hostile_paths(backend: KubernetesBackend, tmp_path: Path) -> None:
    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        setup = (
            "ln -s /etc/hostname demo/link && ln -s /etc demo/etcdir && ln -s /tmp/newfile demo/dangling "
            "&& ln -s ../.. demo/up && ln -s /workspace/demo/hello.py demo/inside"
        )
        assert (await backend.exec(ref, ["sh", "-c", setup])).exit_code == 0
        for bad in (
            "../outside.txt",
            "/etc/passwd",
            "demo/../../x",
            "demo/link",
            "demo/etcdir/hostname",
            "demo/up/etc/hostname",
        ):
            with pytest.raises(PathRefused):
                await backend.read_file(ref, bad)
        for bad in ("../x", "/tmp/x", "demo/link", "demo/etcdir/new", "demo/dangling", ".labserver-tmp/x"):
            with pytest.raises(PathRefused):
                await backend.write_file(ref, bad, b"x")
        for bad in ("demo/etcdir", "../", "/etc"):
            with pytest.raises(PathRefused):
                await backend.list_files(ref, bad)
            with pytest.raises(PathRefused):
                await backend.archive(ref, bad)
        with pytest.raises(PathRefused):
            await backend.exec(ref, ["pwd"], cwd="demo/etcdir")
        res = await backend.exec(ref, ["sh", "-c", "cat /tmp/newfile 2>&1; ls /workspace/demo/link -l"])
        assert b"No such file" in res.stdout  # nothing was written through the dangling link
        assert await backend.read_file(ref, "demo/inside") == b"print('hello from starter')\n"
        paths = {e.path for e in await backend.list_files(ref, "demo")}
        assert "demo/link" not in paths and "demo/etcdir/hostname" not in paths and "demo/hello.py" in paths
        names = zipfile.ZipFile(io.BytesIO(await backend.archive(ref, "demo"))).namelist()
        assert "demo/hello.py" in names and not any("hostname" in n or "passwd" in n for n in names)

    run(go())


def test_fake_api_workspace_outlives_the_pod_and_is_read_only_in_the_grader(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    checker = tmp_path / "check.py"
    checker.write_text(
        "import json, os\n"
        "try:\n    open('kept.txt', 'a').write('x'); wrote = 'wrote'\n"
        "except OSError as e:\n    wrote = type(e).__name__\n"
        "os.write(int(os.environ['LAB_RESULT_FD']), json.dumps({'passed': open('kept.txt').read() == 'kept',"
        " 'message': wrote}).encode())\n"
    )

    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        await backend.write_file(ref, "demo/kept.txt", b"kept")
        await backend.stop(ref)
        assert cluster.names("pods") == []
        ref = await backend.create(spec(tmp_path))  # a new pod, the same claim
        assert await backend.read_file(ref, "demo/kept.txt") == b"kept"
        raw = await backend.run_check(ref, CheckRequest(lab_id="demo", step_id="s", checker=checker, env={}))
        verdict = interpret(raw, 60)
        assert verdict.status == CheckStatus.passed and verdict.message == "OSError", verdict
        res = await backend.exec(ref, ["sh", "-c", "cat kept.txt; touch new.txt"], cwd="demo", readonly=True)
        assert res.stdout == b"kept" and b"Read-only" in res.stderr and res.exit_code == 1
        assert await backend.read_file(ref, "demo/kept.txt") == b"kept"

    run(go())
    assert cluster.names("pods") == [km.pod_name("ev1-at1")]  # grader pods removed
    assert cluster.names("secrets") == []


def _forged(nonce: str, passed: bool = True) -> bytes:
    body = json.dumps(
        {
            "duration_s": 0.1,
            "exit_code": 0,
            "log": "",
            "log_truncated": False,
            "missing": False,
            "nonce": nonce,
            "result": base64.b64encode(
                json.dumps({"passed": passed, "message": "forged pass"}).encode()
            ).decode(),
            "timed_out": False,
        }
    )
    mac = hmac.new(b"a guessed key", body.encode(), hashlib.sha256).hexdigest()
    return (MARK + json.dumps({"body": body, "mac": mac})).encode()


def test_fake_api_getting_started_step_one_in_the_grader_pod_valid_and_forged(
    backend: KubernetesBackend, cluster: FakeCluster
) -> None:
    lab = LabSeed("getting-started", GETTING_STARTED / "starter")
    request = CheckRequest(
        lab_id="getting-started",
        step_id="find-device",
        checker=GETTING_STARTED / "checks" / "01_find_device.py",
        env={"LAB_ID": "getting-started", "LAB_STEP": "find-device"},
        timeout_s=60,
    )

    async def check(ref: EnvRef) -> tuple[CheckStatus, str, bytes]:
        raw = await backend.run_check(ref, request)
        verdict = interpret(raw, 60)
        return verdict.status, verdict.message, raw.log

    async def go() -> None:
        ref = await backend.create(spec(Path("."), labs=(lab,)))
        kind = "cpu-emu"  # what device_info.py prints without a card
        await backend.write_file(ref, "getting-started/device.txt", f"{kind}\n".encode())
        # valid: the signed record is read, even with a forged (failing) record before it in the log
        cluster.tamper_log = lambda pod, log: _forged(_nonce(log), passed=False) + b"\n" + log
        status, message, _ = await check(ref)
        assert status == CheckStatus.passed and kind in message, message
        # forged: the attendee's file carries a record line (it travels base64 inside the real
        # record), and one follows the real record in the pod's log (what a process writing to the
        # container's output could add) with the job's own nonce but not its key: no verdict at
        # all, never a pass
        await backend.write_file(ref, "getting-started/device.txt", b"npu\n" + _forged("0" * 32) + b"\n")
        cluster.tamper_log = lambda pod, log: log + b"\n" + _forged(_nonce(log)) + b"\n"
        status, message, log = await check(ref)
        assert status == CheckStatus.error and b"forged record" in log, (status, message, log)

    run(go())


def _nonce(log: bytes) -> str:
    line = next(ln for ln in log.decode().splitlines() if ln.startswith(MARK))
    return str(json.loads(json.loads(line[len(MARK) :])["body"])["nonce"])


def test_fake_api_grader_pod_whose_init_fails_is_a_checker_error(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    checker = tmp_path / "check.py"
    checker.write_text("import os; os.write(int(os.environ['LAB_RESULT_FD']), b'{\"passed\": true}')\n")

    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        req = CheckRequest(lab_id="demo", step_id="s", checker=checker, env={})
        assert interpret(await backend.run_check(ref, req), 60).status == CheckStatus.passed
        with cluster.lock:  # the cached lab bundle no longer matches its hash
            for (plural, _), obj in cluster.objects.items():
                if plural == "configmaps":
                    obj["binaryData"] = {k: base64.b64encode(b"tampered").decode() for k in obj["binaryData"]}
        raw = await backend.run_check(ref, req)
        assert interpret(raw, 60).status == CheckStatus.error and b"unpack exit 3" in raw.log, raw

    run(go())


def test_fake_api_exec_into_a_pod_that_is_not_running_is_gone_not_api_down(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    """The API server answered (400: no host assigned, 403: no exec right): the environment is not
    there, the cluster is up; no retry of the handshake, no "the cluster does not answer"."""

    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        with cluster.lock:
            cluster.objects[("pods", ref.infra_id)]["spec"].pop("nodeName")
            cluster.objects[("pods", ref.infra_id)]["status"] = fake_api.unschedulable("node lost")
        before = len(cluster.requests)
        with pytest.raises(EnvironmentGone) as err:
            await backend.exec(ref, ["true"])
        assert err.value.reason != "api-down" and "host assigned" in err.value.log
        assert sum(1 for _, p in cluster.requests[before:] if p.endswith("/exec")) == 1
        with pytest.raises(EnvironmentGone):
            await backend.terminal(ref, 80, 24)
        cluster.rules.discard(("", "pods/exec", "create"))  # a Role without pods/exec
        with pytest.raises(EnvironmentGone) as err:
            await backend.read_file(ref, "demo/hello.py")
        assert (
            err.value.reason == "exec-refused"
            and "rights" in err.value.message
            and "权限" in err.value.message
        )

    run(go())


def test_fake_api_thirty_execs_at_once(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    """Thirty commands that wait for a file, then the save that writes it: none may wait for a
    thread behind the others (they would time out), each gets its own output."""
    wait = 'while [ ! -e go ]; do sleep 0.05; done; echo "$1"'

    async def go() -> None:
        refs = await asyncio.gather(*(backend.create(spec(tmp_path, f"ev1-at{i}")) for i in range(3)))
        runs = [
            asyncio.ensure_future(
                backend.exec(refs[i % 3], ["sh", "-c", wait, "sh", str(i)], cwd="demo", timeout=20)
            )
            for i in range(30)
        ]
        await asyncio.sleep(0.5)
        await asyncio.gather(*(backend.write_file(r, "demo/go", b"") for r in refs))
        results = await asyncio.gather(*runs)
        assert [r.timed_out for r in results] == [False] * 30
        assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(30)]

    run(go())
    assert cluster.kubelet.execs >= 33


def test_fake_api_exec_cut_after_it_started_is_not_run_again(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    """The connection drops (RST) once the command printed: it ran, so it is not retried (a save
    or a training run must not happen twice); the attendee is told the environment stopped
    answering."""

    async def go() -> None:
        ref = await backend.create(spec(tmp_path))
        cluster.kubelet.reset_after_output = lambda argv: "started" in " ".join(argv)
        with pytest.raises(EnvironmentGone) as err:
            await backend.exec(ref, ["sh", "-c", "echo run >> runs.txt; echo started; sleep 2"], cwd="demo")
        assert await backend.read_file(ref, "demo/runs.txt") == b"run\n"  # once
        assert err.value.reason != "api-down" and "stopped answering" in err.value.message, err.value

    run(go())


def test_fake_api_stopped_attendee_gets_their_own_workspace_back_with_a_warm_pool(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    """With warm pods waiting, a stopped (idle-culled, evicted) attendee's next start must mount
    their own claim again, never a warm pod's empty one; and a warm pod's claim follows the
    attendee it went to (through stop and start), and goes with destroy."""

    def seat(i: int) -> EnvSpec:
        return EnvSpec(**{**spec(tmp_path, f"ev7-at{i}").__dict__, "event_id": 7})

    async def go() -> None:
        assert await backend.prepare_event(7, seat(0), 1) == 1
        warm = await backend.create(seat(1))  # takes the warm pod
        assert warm.infra_id.startswith("labserver-warm-")
        own = await backend.create(seat(2))  # no warm pod left: its own pod and claim
        await backend.write_file(warm, "demo/mine.txt", b"one")
        await backend.write_file(own, "demo/mine.txt", b"two")
        await backend.stop(warm)
        await backend.stop(own)
        assert await backend.prepare_event(7, seat(0), 2) == 2  # the pool refilled meanwhile
        warm = await backend.create(seat(1))
        own = await backend.create(seat(2))
        assert await backend.read_file(warm, "demo/mine.txt") == b"one"
        assert await backend.read_file(own, "demo/mine.txt") == b"two"
        await backend.destroy(warm)
        await backend.destroy(own)
        await backend.prepare_event(7, seat(0), 0)

    run(go())
    assert cluster.names("pods") == [] and cluster.names("persistentvolumeclaims") == []


def test_fake_api_thirty_checks_at_once(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    """Thirty grader pods at once over three attendees (the Check button pressed everywhere):
    each verdict is its own attendee's, every grader pod and Secret is removed."""
    checker = tmp_path / "check.py"
    checker.write_text(
        "import json, os\n"
        "os.write(int(os.environ['LAB_RESULT_FD']), json.dumps({'passed': True, 'message': open('who').read()}).encode())\n"
    )

    async def go() -> None:
        refs = await asyncio.gather(*(backend.create(spec(tmp_path, f"ev1-at{i}")) for i in range(3)))
        await asyncio.gather(*(backend.write_file(r, "demo/who", r.env_id.encode()) for r in refs))
        req = CheckRequest(lab_id="demo", step_id="s", checker=checker, env={}, timeout_s=60)
        raws = await asyncio.gather(*(backend.run_check(refs[i % 3], req) for i in range(30)))
        verdicts = [interpret(raw, 60) for raw in raws]
        assert [(v.status, v.message) for v in verdicts] == [
            (CheckStatus.passed, refs[i % 3].env_id) for i in range(30)
        ]

    run(go())
    assert [n for n in cluster.names("pods") if "grader" in n] == [] and cluster.names("secrets") == []
    assert len(cluster.names("configmaps")) == 1  # the bundle, sent once


def test_fake_api_thirty_terminals_at_once_and_closing_ends_their_shells(
    backend: KubernetesBackend, cluster: FakeCluster, tmp_path: Path
) -> None:
    async def session(ref: EnvRef, i: int) -> bytes:
        term = await backend.terminal(ref, 80, 24)
        await term.write(f"echo term-$((1000+{i}))\r".encode())
        buf = b""
        while f"term-{1000 + i}".encode() not in buf:
            chunk = await asyncio.wait_for(term.read(), 20)
            assert chunk, buf
            buf += chunk
        await term.write(b"sleep 300\r")  # still running when the attendee closes the tab
        await term.close()
        return buf

    async def go() -> None:
        refs = await asyncio.gather(*(backend.create(spec(tmp_path, f"ev1-at{i}")) for i in range(3)))
        outs = await asyncio.gather(*(session(refs[i % 3], i) for i in range(30)))
        assert all(f"term-{1000 + i}".encode() in out for i, out in enumerate(outs))
        for _ in range(100):  # the kubelet ends each closed session's shell
            if not any(cluster.kubelet.procs.values()):
                break
            await asyncio.sleep(0.05)
        assert not any(cluster.kubelet.procs.values())

    run(go())
