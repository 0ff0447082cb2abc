"""Attacks on the local backend from an attendee's terminal and from inside a check (issue 13, items
1 and 2). Each test does what an attendee would do: it opens the real PTY shell through
``LocalBackend.terminal()`` and types commands, or runs a check on files the attendee wrote.

The server under attack runs as whoever runs pytest (root in CI, which is the case the issue found
broken: bubblewrap run by root kept nearly every capability). ``test_unprivileged_server_*`` runs the
same backend as uid 65534 in a subprocess. What each test proves is listed in docs/security.md."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from labserver.backends import limits
from labserver.backends.base import CheckRequest, EnvRef, EnvSpec, LabSeed, Terminal
from labserver.backends.local import LocalBackend
from labserver.checks.verdict import interpret
from labserver.config import Settings
from labserver.models import CheckStatus
from tests.conftest import REPO

LAB = "getting-started"
TOKEN = "instructor-token-never-seen-by-attendees"
OTHER = "another-attendees-secret"
SOLUTION_LINE = "rstd = torch.rsqrt"  # a line of labs/getting-started/solution/rmsnorm.py
HOST_SOCKETS = ["/var/run/docker.sock", "/run/docker.sock", "/var/run/postgresql/.s.PGSQL.5432"]


@pytest.fixture
def attack(tmp_path: Path) -> Iterator[tuple[LocalBackend, Settings]]:
    """A server whose data folder holds an instructor token, a database and a second attendee's
    workspace; its labs are a copy (an attack that manages to write them must not damage the repo)."""
    assert shutil.which("bwrap"), "bubblewrap is required (apt-get install bubblewrap)"
    labs = tmp_path / "labs"
    shutil.copytree(REPO / "labs" / LAB, labs / LAB)
    settings = Settings(data_dir=tmp_path / "data", labs_dir=labs, instructor_token=TOKEN)
    settings.data_dir.mkdir()
    (settings.data_dir / "instructor_token").write_text(TOKEN)
    (settings.data_dir / "labserver.db").write_text("SQLite format 3 " + TOKEN)
    yield LocalBackend(settings), settings


def spec(settings: Settings, env_id: str = "ev1-at1") -> EnvSpec:
    seed = LabSeed(LAB, settings.labs_dir / LAB / "starter")
    return EnvSpec(env_id=env_id, event_id=1, attendee_id=1, labs=(seed,), memory_mb=512, pids=256)


async def two_attendees(backend: LocalBackend, settings: Settings) -> tuple[EnvRef, EnvRef]:
    mine = await backend.create(spec(settings))
    other = await backend.create(spec(settings, "ev1-at2"))
    await backend.write_file(other, f"{LAB}/secret.txt", OTHER.encode())
    return mine, other


async def read_until(term: Terminal, needle: bytes, timeout: float) -> str:
    buf = b""

    async def loop() -> None:
        nonlocal buf
        while needle not in buf:
            chunk = await term.read()
            if not chunk:
                return
            buf += chunk

    await asyncio.wait_for(loop(), timeout)
    return buf.decode("utf-8", "replace")


async def type_in(term: Terminal, command: str, timeout: float = 60) -> str:
    """Type ``command`` and return what the shell printed up to the end marker. The marker is
    computed by the shell (``$((6*7))``) so the echo of the typed line never matches it."""
    await term.write(command.encode() + b"; echo END-OF-$((6*7))\r")
    out = await read_until(term, b"END-OF-42", timeout)
    return out


def shell(backend: LocalBackend, ref: EnvRef, *commands: str, timeout: float = 60) -> list[str]:
    async def go() -> list[str]:
        term = await backend.terminal(ref, 200, 50, cwd=LAB)
        try:
            return [await type_in(term, c, timeout) for c in commands]
        finally:
            await term.close()

    return asyncio.run(go())


def test_shell_runs_unprivileged_with_no_capabilities(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    status, userns = shell(
        backend,
        mine,
        "grep -E '^(Uid|Gid|CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status",
        "unshare -Ur true; echo userns-exit=$?",
    )
    uid = re.search(r"Uid:\s+(\d+)\s+(\d+)\s+(\d+)", status)
    assert uid and all(int(u) != 0 for u in uid.groups()), status
    assert re.search(r"CapEff:\s+0000000000000000", status), status
    assert re.search(r"CapPrm:\s+0000000000000000", status), status
    assert re.search(r"CapBnd:\s+0000000000000000", status), status
    assert re.search(r"NoNewPrivs:\s+1", status), status
    assert "userns-exit=0" not in userns, userns  # no user namespace of its own either


def test_attendee_shell_and_commands_give_the_cpu_way_to_the_server(attack) -> None:  # type: ignore[no-untyped-def]
    """A room's checks and busy loops must not starve the server that answers every page: an
    attendee's shell and commands run at nice 10 and, under cgroups, with a quarter CPU weight."""
    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    res = asyncio.run(backend.exec(mine, ["/bin/sh", "-c", "nice"]))
    assert res.stdout.decode().strip() == "10", res

    async def in_a_shell() -> tuple[str, str]:
        term = await backend.terminal(mine, 200, 50, cwd=LAB)
        try:
            niceness = await type_in(term, "echo nice=$(nice)", 60)
            weight = ""
            if backend.limiter.name in ("cgroup1", "cgroup2"):  # the group lives while the shell does
                v2 = backend.limiter.name == "cgroup2"
                base = backend.limiter.bases["unified" if v2 else "cpu"]
                weight = (
                    base / limits.safe_name(mine.env_id) / ("cpu.weight" if v2 else "cpu.shares")
                ).read_text()
                assert weight.strip() == str(limits.V2_WEIGHT if v2 else limits.V1_SHARES), weight
            return niceness, weight
        finally:
            await term.close()

    niceness, _ = asyncio.run(in_a_shell())
    assert re.search(r"nice=10\b", niceness), niceness


def test_shell_cannot_remount_the_labs_folder_writable(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    checks = settings.labs_dir / LAB / "checks"
    before = sorted(p.name for p in checks.iterdir())
    out = shell(
        backend,
        mine,
        f"mount -o remount,rw {settings.labs_dir}; mount -o remount,rw /usr; mount -o remount,rw /; "
        f"echo owned > {checks}/01_find_device.py; touch {checks}/pwned.py /usr/pwned",
    )[0]
    assert sorted(p.name for p in checks.iterdir()) == before, out
    assert "owned" not in (checks / "01_find_device.py").read_text()
    assert not Path("/usr/pwned").exists()


def test_shell_cannot_umount_anything(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    umount, token = shell(
        backend,
        mine,
        "for m in $(awk '{print $2}' /proc/self/mounts | sort -r); do umount -l \"$m\" 2>/dev/null "
        '&& echo "UMOUNTED:$m"; done',
        f"cat {settings.data_dir}/instructor_token {settings.data_dir}/labserver.db",
    )
    assert "UMOUNTED:/" not in umount, umount
    assert TOKEN not in token, token


def test_shell_sees_no_data_folder_other_workspace_socket_or_run(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, other = asyncio.run(two_attendees(backend, settings))
    probe = textwrap.dedent(f"""
        import os, socket
        for path in {HOST_SOCKETS!r}:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(path)
                print("CONNECTED:" + path)
            except OSError:
                pass
        for path in ("/run", "/var/run", "/var/lib", "/home", "/srv", "/opt", "/mnt", "/boot", "/sys"):
            if os.path.isdir(path) and os.listdir(path):
                print("VISIBLE:" + path)
        print("DATA:" + repr(sorted(os.listdir({str(settings.data_dir)!r}))))
        for pid in filter(str.isdigit, os.listdir("/proc")):  # the server is not among them
            try:
                print("PROC:" + open(f"/proc/{{pid}}/cmdline", "rb").read().hex())
            except OSError:
                pass
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=2)
            print("NETWORK:/up")
        except OSError:
            pass
    """)
    asyncio.run(backend.write_file(mine, f"{LAB}/probe.py", probe.encode()))
    out = "\n".join(
        shell(
            backend,
            mine,
            f"cat {settings.data_dir}/instructor_token {settings.data_dir}/labserver.db",
            f"cat {other.infra_id}/{LAB}/secret.txt; ls {settings.workspaces_dir} | sed 's/^/WS:/'",
            "python probe.py",
        )
    )
    assert TOKEN not in out and OTHER not in out, out
    assert "WS:ev1-at2" not in out, out
    assert "CONNECTED:/" not in out and "VISIBLE:/" not in out, out
    assert "NETWORK:/" not in out, out
    seen = set(re.findall(r"PROC:([0-9a-f]+)", out))
    assert seen and Path("/proc/self/cmdline").read_bytes().hex() not in seen  # not the server
    # of the data folder only the way down to the attendee's own workspace exists
    assert "DATA:['workspaces']" in out, out


def test_shell_cannot_list_or_read_the_lab_solution(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    solution = settings.labs_dir / LAB / "solution"
    assert SOLUTION_LINE in (solution / "rmsnorm.py").read_text()
    out = shell(backend, mine, f"ls {solution}; cat {solution}/rmsnorm.py; ls {REPO}/labs/{LAB}/solution")[0]
    assert "device.txt" not in out and SOLUTION_LINE not in out, out


FORK = """
import subprocess
procs = []
try:
    for _ in range(600):
        procs.append(subprocess.Popen(["sleep", "60"]))
except OSError:
    pass
print("STARTED", len(procs))
for p in procs:
    p.kill()
for p in procs:
    p.wait()
"""


@pytest.mark.parametrize("mechanism", ["auto", "rlimit"])
def test_fork_loop_is_bounded_by_the_pids_limit(attack, mechanism: str) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    if mechanism != "auto":  # the fallback, as on a machine without writable cgroups
        settings.local.limits = mechanism  # type: ignore[assignment]
        backend = LocalBackend(settings)
    mine, other = asyncio.run(two_attendees(backend, settings))
    asyncio.run(backend.write_file(mine, f"{LAB}/fork.py", FORK.encode()))
    out, after = shell(backend, mine, "python fork.py", "echo still-$((2+3))", timeout=120)
    started = int(re.search(r"STARTED (\d+)", out).group(1))  # type: ignore[union-attr]
    assert started < 256, out  # spec pids=256 counts the shell, python and the sandbox too
    assert backend.limiter.name != "none" and mechanism in ("auto", backend.limiter.name)
    assert "still-5" in after
    # the host and the other attendee are unharmed
    res = asyncio.run(backend.exec(other, ["python", "-c", "print('neighbour ok')"]))
    assert b"neighbour ok" in res.stdout, res.stderr


@pytest.mark.parametrize("mechanism", ["auto", "rlimit"])
def test_memory_hog_is_bounded_by_the_memory_limit(attack, mechanism: str) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    if mechanism != "auto":  # the fallback, as on a machine without writable cgroups
        settings.local.limits = mechanism  # type: ignore[assignment]
        backend = LocalBackend(settings)
    mine, other = asyncio.run(two_attendees(backend, settings))
    hog = 'data = b"\\x01" * (3 << 30)\nprint("ALLOCATED", len(data) >> 20, "MiB")\n'
    asyncio.run(backend.write_file(mine, f"{LAB}/hog.py", hog.encode()))
    out = shell(backend, mine, "python hog.py; echo hog-exit=$?", timeout=120)[0]
    assert "ALLOCATED" not in out, out
    assert "hog-exit=0" not in out, out
    assert backend.limiter.name != "none" and mechanism in ("auto", backend.limiter.name)
    res = asyncio.run(backend.exec(other, ["python", "-c", "print('neighbour ok')"]))
    assert b"neighbour ok" in res.stdout, res.stderr


def test_a_symlink_to_the_solution_passes_no_check(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    solution = settings.labs_dir / LAB / "solution" / "rmsnorm.py"
    shell(backend, mine, f"ln -sf {solution} rmsnorm.py")
    checker = settings.labs_dir / LAB / "checks" / "04_implement_rmsnorm.py"
    raw = asyncio.run(
        backend.run_check(
            mine, CheckRequest(lab_id=LAB, step_id="implement-rmsnorm", checker=checker, env={}, timeout_s=90)
        )
    )
    verdict = interpret(raw, 90)
    assert verdict.status != CheckStatus.passed, (verdict, raw.log[-2000:])


PROBE_CHECKER = """
import json, os, sys
found = [p for p in sys.argv[1:] if os.path.exists(p)]
found += [p for p in ("/run", "/var/run") if os.path.isdir(p) and os.listdir(p)]
os.write(int(os.environ["LAB_RESULT_FD"]), json.dumps({"passed": not found, "message": json.dumps(found)}).encode())
sys.exit(0 if not found else 1)
"""


def test_a_check_sees_no_solution_data_folder_or_other_workspace(attack) -> None:  # type: ignore[no-untyped-def]
    backend, settings = attack
    mine, other = asyncio.run(two_attendees(backend, settings))
    secrets = [
        settings.labs_dir / LAB / "solution",
        settings.data_dir / "instructor_token",
        settings.data_dir / "labserver.db",
        Path(other.infra_id),
        *map(Path, HOST_SOCKETS),
    ]
    checker = settings.labs_dir / LAB / "checks" / "99_probe.py"
    args = " ".join(map(str, secrets))
    checker.write_text(f"import sys\nsys.argv[1:] = {args.split()!r}\n" + PROBE_CHECKER)
    raw = asyncio.run(
        backend.run_check(mine, CheckRequest(lab_id=LAB, step_id="probe", checker=checker, env={}))
    )
    verdict = interpret(raw, 60)
    assert verdict.status == CheckStatus.passed, (verdict.message, raw.log[-2000:])


# --- the same backend run by an unprivileged server user -----------------------------------------

UNPRIVILEGED = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path

    from labserver.backends.base import EnvSpec, LabSeed
    from labserver.backends.local import LocalBackend
    from labserver.config import Settings

    data, labs = Path(sys.argv[1]), Path(sys.argv[2])
    backend = LocalBackend(Settings(data_dir=data, labs_dir=labs, sandbox="bwrap"))
    commands = json.loads(sys.argv[3])

    async def main():
        seed = LabSeed("getting-started", labs / "getting-started" / "starter")
        ref = await backend.create(EnvSpec(env_id="ev1-at1", event_id=1, attendee_id=1, labs=(seed,),
                                           memory_mb=512, pids=128))
        await backend.write_file(ref, "getting-started/fork.py", sys.argv[4].encode())
        term = await backend.terminal(ref, 200, 50, cwd="getting-started")
        outs = []
        for command in commands:
            await term.write(command.encode() + b"; echo END-OF-$((6*7))\\r")
            buf = b""
            while b"END-OF-42" not in buf:
                chunk = await asyncio.wait_for(term.read(), 120)
                if not chunk:
                    break
                buf += chunk
            outs.append(buf.decode("utf-8", "replace"))
        await term.close()
        print(json.dumps(outs))

    asyncio.run(main())
""")


def _as_nobody(argv: list[str]) -> list[str]:
    """``argv`` as uid/gid 65534 with no groups. When this interpreter lives where 65534 cannot
    reach it (``/root/.pyenv`` under a 0700 ``/root``), run in a private mount namespace in which
    only that folder is made reachable, as an operator would install a server's Python."""
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    prefix = Path(sys.base_prefix).resolve()
    blocked = next(
        (a for a in reversed(prefix.parents) if a != Path("/") and not os.stat(a).st_mode & 0o001), None
    )
    if blocked is None:
        return drop + argv
    script = (
        f"set -e; hold=$(mktemp -d); mount --bind {prefix} $hold; "
        f"mount -t tmpfs -o mode=755 tmpfs {blocked}; mkdir -p {prefix}; mount --bind $hold {prefix}; "
        'umount $hold; exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *drop, *argv]


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A folder uid 65534 can reach (pytest's own tmp folders are 0700 root)."""
    root = Path(tempfile.mkdtemp(prefix="labserver-nobody-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.usefixtures("as_root")  # needs root to become uid 65534 (CI runs as root)
def test_unprivileged_server_gives_a_namespaced_limited_shell(nobody_dir: Path) -> None:
    """A server run by an ordinary user: the shell is that user in a user namespace, with no
    capabilities, no data folder, no solution and bounded processes."""
    root = nobody_dir / "srv"
    labs = root / "labs"
    shutil.copytree(REPO / "labs" / LAB, labs / LAB)
    data = root / "data"
    data.mkdir()
    (data / "instructor_token").write_text(TOKEN)
    subprocess.run(["chown", "-R", "65534:65534", str(root)], check=True)
    commands = [
        "grep -E '^(Uid|CapEff|NoNewPrivs)' /proc/self/status",
        f"cat {data}/instructor_token; ls {labs}/{LAB}/solution",
        "unshare -Ur true; echo userns-exit=$?",
        "python fork.py",
    ]
    script = nobody_dir / "unprivileged.py"
    script.write_text(UNPRIVILEGED)
    os.chmod(script, 0o644)
    out = subprocess.run(
        _as_nobody([sys.executable, str(script), str(data), str(labs), json.dumps(commands), FORK]),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    status, secrets, userns, fork = json.loads(out.stdout.strip().splitlines()[-1])
    assert re.search(r"Uid:\s+65534\s", status) and re.search(r"CapEff:\s+0{16}", status), status
    assert re.search(r"NoNewPrivs:\s+1", status), status
    assert TOKEN not in secrets and "device.txt" not in secrets, secrets
    assert "userns-exit=0" not in userns, userns
    started = int(re.search(r"STARTED (\d+)", fork).group(1))  # type: ignore[union-attr]
    assert started < 128, fork


@pytest.mark.usefixtures("as_root")  # the root-server case (CI runs as root)
def test_unsandboxed_root_server_still_runs_attendees_unprivileged(nobody_dir: Path) -> None:
    """Without bubblewrap a root server cannot hide its files, but it never hands out root: the
    shell and commands run as the environment's own uid, with no capabilities."""
    settings = Settings(data_dir=nobody_dir / "data", labs_dir=REPO / "labs", sandbox="none")
    backend = LocalBackend(settings)
    ref = asyncio.run(backend.create(spec(settings)))
    res = asyncio.run(backend.exec(ref, ["/bin/sh", "-c", "id -u; grep CapEff /proc/self/status"]))
    uid, caps = res.stdout.decode().split("\n", 1)
    assert int(uid) >= 1_900_000_000, res  # LABSERVER_LOCAL__UID_BASE
    assert "0000000000000000" in caps, caps
    assert not backend.isolation.complete and backend.join_refusal("203.0.113.9")


def test_a_bubblewrap_that_does_not_work_is_reported_and_bwrap_mode_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E.g. user namespaces switched off for normal users: the server must not believe it is
    isolated. ``auto`` falls back and says so (remote attendees refused); ``bwrap`` stops."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    settings = Settings(data_dir=tmp_path / "data", labs_dir=REPO / "labs")
    backend = LocalBackend(settings)
    assert backend.bwrap is None and backend.isolation.sandbox == "none"
    assert any("No permissions" in p for p in backend.isolation.problems), backend.isolation
    assert backend.join_refusal("198.51.100.7") and backend.join_refusal("127.0.0.1") is None
    with pytest.raises(RuntimeError, match="does not work"):
        LocalBackend(settings.model_copy(update={"sandbox": "bwrap"}))
