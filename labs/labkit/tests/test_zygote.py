"""The check fork server (labkit.check.zygote): what its children can and cannot reach, with real
processes. The isolation tests of test_check.py run through it too (every run_function does)."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

from labkit.check import zygote

PROBE = """
import os, random

def probe(checker_pid):
    out = {"fds": sorted(int(f) for f in os.listdir("/proc/self/fd")), "env": sorted(os.environ)}
    with open("/proc/self/environ", "rb") as fh:
        out["environ_has_run_id"] = b"run-secret-123" in fh.read()
    for who, pid in (("zygote", os.getppid()), ("checker", checker_pid)):
        for what in ("fd", "mem", "environ"):
            # a root test run may list /proc/<pid>/fd (owner root); opening what is in it is the attack
            paths = [f"/proc/{pid}/fd/{n}" for n in range(0, 8)] if what == "fd" else [f"/proc/{pid}/{what}"]
            outcome = set()
            for path in paths:
                try:
                    os.close(os.open(path, os.O_RDONLY if what != "fd" else os.O_WRONLY))
                    outcome.add("open")
                except OSError as exc:
                    outcome.add(type(exc).__name__)
            outcome.discard("FileNotFoundError")
            out[f"{who}_{what}"] = ",".join(sorted(outcome))
    out["random"] = random.random()
    return out
"""


def test_a_child_reaches_neither_the_zygote_nor_the_checker(run_checker):  # type: ignore[no-untyped-def]
    run = run_checker(
        """
        import json, os
        from labkit.check import main, run_function
        def check():
            a = run_function("probe.py", "probe", os.getpid()).unwrap()
            b = run_function("probe.py", "probe", os.getpid()).unwrap()
            a["random_differs"] = a.pop("random") != b["random"]
            return json.dumps(a)
        main(check)
        """,
        {"probe.py": PROBE},
    )
    assert run.exit_code == 0, run.stderr
    seen = json.loads(run.verdicts[0]["message"])
    # stdin, stdout, stderr and the descriptor listdir itself opened: no channel, no result pipe
    assert len(seen["fds"]) == 4 and seen["fds"][:3] == [0, 1, 2], seen
    assert not {"LAB_RESULT_FD", "LAB_RUN_ID", zygote.ENV_VAR} & set(seen["env"]), seen
    assert seen["environ_has_run_id"] is False
    for who in ("zygote", "checker"):
        for what in ("fd", "mem", "environ"):
            assert seen[f"{who}_{what}"] == "PermissionError", (who, what, seen)
    assert seen["random_differs"], "forked children repeat each other's random draws"


def test_a_process_that_escapes_its_session_dies_when_its_call_ends(run_checker, tmp_path: Path):  # type: ignore[no-untyped-def]
    flag = tmp_path / "escaped-alive"
    run = run_checker(
        f"""
        import time, pathlib
        from labkit.check import main, run_function
        def check():
            assert run_function("escape.py", "escape").unwrap() == 1, "the escaped process never ran"
            flag = pathlib.Path({str(flag)!r})
            run_function("escape.py", "nothing").unwrap()
            time.sleep(1.0)
            before = flag.stat().st_mtime
            time.sleep(1.5)
            return "alive" if flag.stat().st_mtime != before else "dead"
        main(check)
        """,
        {
            "escape.py": f"""
            import os, pathlib, time
            def escape():
                if os.fork() == 0:
                    os.setsid()
                    if os.fork() == 0:
                        while True:
                            pathlib.Path({str(flag)!r}).touch()
                            time.sleep(0.2)
                    os._exit(0)
                for _ in range(300):  # return once the escaped process runs
                    if pathlib.Path({str(flag)!r}).exists():
                        return 1
                    time.sleep(0.1)
                return 0
            def nothing():
                return 0
            """
        },
    )
    assert run.exit_code == 0, run.stderr
    assert run.verdicts[0]["message"] == "dead"


CHECKER_ASKS_FOR_A_CHECKER = """
import json, os, socket
from labkit.check import zygote
channel = socket.socket(fileno=int(os.environ[zygote.ENV_VAR]))
r, w = os.pipe()
env_fd = zygote.env_pipe({})
zygote.send(channel, {"op": "spawn", "id": 7, "mode": "checker", "argv": ["/bin/true"], "cwd": "/"},
            [0, 1, 2, env_fd, w])
answer, _ = zygote.recv(channel)
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps(answer).encode())
"""


def test_only_the_zygotes_own_channel_may_spawn_a_checker(tmp_path: Path) -> None:
    checker = tmp_path / "checker.py"
    checker.write_text(textwrap.dedent(CHECKER_ASKS_FOR_A_CHECKER))
    client = zygote.start({"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    result_r, result_w = os.pipe()
    env_fd = zygote.env_pipe({"LAB_RUN_ID": "run-secret-123"})
    log = os.open(os.devnull, os.O_WRONLY)
    try:
        zygote.send(
            client.sock,
            {"op": "spawn", "id": 1, "mode": "checker", "argv": [str(checker)], "cwd": str(tmp_path)},
            [0, log, log, env_fd, result_w],
        )
    finally:
        for fd in (result_w, env_fd, log):
            os.close(fd)
    messages = [client._receive(60), client._receive(60)]
    assert [m["op"] for m in messages if m] == ["started", "exited"], messages
    assert messages[1] and messages[1]["code"] == 0, messages
    with os.fdopen(result_r, "rb") as fh:
        answer = json.loads(fh.read())
    assert answer["op"] == "refused", answer
    client.sock.close()
    assert client.proc is not None
    client.proc.wait(timeout=30)  # the zygote ends with its channel


def test_a_zygote_whose_channel_closes_ends_with_its_children(tmp_path: Path) -> None:
    flag = tmp_path / "child-alive"
    script = tmp_path / "spin.py"
    script.write_text(
        f"import pathlib, time\nwhile True:\n    pathlib.Path({str(flag)!r}).touch(); time.sleep(0.2)\n"
    )
    client = zygote.start({"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    env_fd = zygote.env_pipe({})
    out = os.open(os.devnull, os.O_WRONLY)
    zygote.send(
        client.sock,
        {
            "op": "spawn",
            "id": 1,
            "mode": "exec",
            "argv": ["0", "0", "0", sys.executable, str(script)],
            "cwd": "/",
        },
        [0, out, out, env_fd],
    )
    os.close(env_fd)
    os.close(out)
    started = client._receive(60)
    assert started and started["op"] == "started", started
    for _ in range(100):
        if flag.exists():
            break
        time.sleep(0.1)
    assert flag.exists()
    client.sock.shutdown(socket.SHUT_RDWR)
    client.sock.close()
    assert client.proc is not None
    client.proc.wait(timeout=30)
    time.sleep(1.0)
    before = flag.stat().st_mtime
    time.sleep(1.5)
    assert flag.stat().st_mtime == before, "a child outlived its zygote"


CHECKER_CALLS_ONCE = """
from labkit.check import run_function

res = run_function("quick.py", "answer")
assert res.ok and res.value == 42, res
"""


def test_a_lazy_zygote_says_when_it_imports_torch_for_a_checker(tmp_path: Path) -> None:
    """The server stops a check's clock while the runner imports torch for its first attendee call
    (labserver/backends/local_zygote.py): the zygote says ``preloading`` before the import and
    ``preloaded`` (with its wall time) after, to the checker's owner; only once."""
    import subprocess

    (tmp_path / "quick.py").write_text("def answer():\n    return 42\n")
    checker = tmp_path / "checker.py"
    checker.write_text(textwrap.dedent(CHECKER_CALLS_ONCE))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        zygote.command(theirs.fileno(), lazy=True),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        pass_fds=(theirs.fileno(),),
        start_new_session=True,
    )
    theirs.close()
    client = zygote.Client(ours, proc)
    try:
        assert (client._receive(120) or {}).get("op") == "ready"
        for ident in (1, 2):  # the second check finds torch loaded: nothing to say
            result_r, result_w = os.pipe()
            env_fd = zygote.env_pipe({"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
            log = os.open(os.devnull, os.O_WRONLY)
            try:
                zygote.send(
                    client.sock,
                    {
                        "op": "spawn",
                        "id": ident,
                        "mode": "checker",
                        "argv": [str(checker)],
                        "cwd": str(tmp_path),
                    },
                    [0, log, log, env_fd, result_w],
                )
            finally:
                for fd in (result_w, env_fd, log):
                    os.close(fd)
            messages = []
            while not messages or messages[-1]["op"] != "exited":
                message = client._receive(120)
                assert message is not None, messages
                messages.append(message)
            os.close(result_r)
            ops = [m["op"] for m in messages]
            want = ["started", "preloading", "preloaded", "exited"] if ident == 1 else ["started", "exited"]
            assert ops == want, messages
            assert all(m["id"] == ident for m in messages) and messages[-1]["code"] == 0, messages
            if ident == 1:
                assert messages[2]["wall_s"] > 0
    finally:
        ours.close()
        proc.wait(timeout=30)
