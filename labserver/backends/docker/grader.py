"""Tamper-proof checks for the Docker backend.

Each check runs in a fresh, short-lived grader container made from the attendee's image, with the
attendee's workspace volume mounted READ-ONLY, no network and tight limits. The server copies in
(root-owned, before the container starts) the trusted runner (``grader_runner.py``), the checker
file from the lab folder on the server (never the workspace copy) and a per-check secret key. labkit
is the image's (``/opt/venv``, root-owned): a fake ``labkit/`` or ``sitecustomize.py`` in the
workspace is never on the checker's ``sys.path`` (``python -I``, cwd not on the path). The verdict
travels through the runner's pipe and reaches the server as an HMAC-signed record read with
``get_archive``, separately from anything the checker or the attendee's code prints.

:func:`run_readonly` runs any command the same way (``Backend.exec(..., readonly=True)``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import io
import json
import secrets
import tarfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors

from labserver.backends.base import BackendError, CheckRaw, CheckRequest, EnvironmentGone, ExecResult
from labserver.backends.docker import config as dc
from labserver.backends.docker.scheduler import Placement

RUNNER = Path(__file__).with_name("grader_runner.py")
GRACE_S = 30.0  # on top of the checker's own timeout: container start, python start, teardown
GRADER_SKIP = {"solution", "steps", "__pycache__", ".git"}
GRADER_MAX_BYTES = 64 * 1024 * 1024

LabFiles = tuple[list[tuple[str, bytes]], str]
#: lab folder -> (signature of its files, what grader_lab_files returned): a check re-reads the lab
#: folder only when a file in it changed (an instructor editing a checker during the event)
_LAB_FILES: dict[Path, tuple[tuple[tuple[str, int, int], ...], LabFiles]] = {}


def _trusted_paths(root: Path, checker_name: str) -> list[tuple[str, Path]]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (
            rel.parts[0] in GRADER_SKIP
            or "__pycache__" in rel.parts
            or not path.is_file()
            or path.is_symlink()
        ):
            continue
        if rel.as_posix() == f"checks/{checker_name}":
            continue  # sent as the checker itself
        out.append((rel.as_posix(), path))
    return out


def grader_lab_files(checker: Path) -> LabFiles:
    """The lab's trusted files the grader gets (all but ``solution/`` and ``steps/``) and the
    checker's path among them. A checker outside a lab's ``checks/`` folder travels alone.

    Cached per lab folder and checker under the signature (path, size, mtime) of those files: a
    check stats the folder but reads it only when something changed."""
    checker = checker.resolve()
    if checker.parent.name != "checks" or not (checker.parent.parent / "lab.yaml").is_file():
        return [], checker.name
    root = checker.parent.parent
    paths = _trusted_paths(root, checker.name)
    signature = tuple((rel, (st := p.stat()).st_size, st.st_mtime_ns) for rel, p in paths)
    cached = _LAB_FILES.get(checker)
    if cached is not None and cached[0] == signature:
        return cached[1]
    files: list[tuple[str, bytes]] = []
    total = 0
    for rel, path in paths:
        data = path.read_bytes()
        total += len(data)
        if total > GRADER_MAX_BYTES:
            raise EnvironmentGone(
                f"The lab folder {root.name} is too big to send to a grader.", reason="lab-too-big"
            )
        files.append((rel, data))
    result: LabFiles = (files, f"lab/checks/{checker.name}")
    _LAB_FILES[checker] = (signature, result)
    return result


def _tar(entries: list[tuple[str, bytes | None, int, int]]) -> bytes:
    """(name, data or None for a folder, uid, mode) -> tar bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, uid, mode in entries:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = uid
            info.mode = mode
            info.mtime = int(time.time())
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _lab_entries(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes | None, int, int]]:
    """Tar entries (root-owned, read-only) for the lab's files, with their folders first."""
    folders = sorted(
        {str(parent) for rel, _ in files for parent in PurePosixPath(rel).parents if str(parent) != "."}
    )
    entries: list[tuple[str, bytes | None, int, int]] = [("grader/lab", None, 0, 0o755)]
    entries += [(f"grader/lab/{folder}", None, 0, 0o755) for folder in folders]
    entries += [(f"grader/lab/{rel}", data, 0, 0o444) for rel, data in files]
    return entries


def _read_member(client: docker.DockerClient, container_id: str, path: str) -> bytes | None:
    try:
        stream, _ = client.api.get_archive(container_id, path)
    except docker.errors.NotFound:
        return None
    raw = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                return f.read() if f else None
    return None


def _grader_name(env_id: str, prefix: str) -> str:
    return f"{prefix}-grader-{dc.escape(env_id)}-{secrets.token_hex(4)}"


def run_in_grader(
    client: docker.DockerClient,
    *,
    env_id: str,
    image: str,
    volume: str,
    placement: Placement | None,
    lab_id: str,
    checker_name: str,
    checker_source: bytes,
    env: dict[str, str],
    lab_files: list[tuple[str, bytes]] | None = None,
    timeout_s: float,
    log_limit: int,
    cpus: float,
    memory_mb: int,
    prefix: str = dc.DEFAULT_PREFIX,
) -> dict[str, Any]:
    """Run the checker in a grader container; returns the verified record (raises on forgery or
    when no valid record came back: a checker error for the caller).

    ``lab_files`` are the lab's own trusted files from the server (``checks/``, ``starter/``, ...;
    never ``solution/``), laid out under ``/opt/labserver/grader/lab/`` so a checker can import its
    helpers and compare against a clean starter; ``checker_name`` is then ``lab/checks/NN_x.py``."""
    key = secrets.token_bytes(32)
    nonce = secrets.token_hex(16)
    job = {"nonce": nonce, "checker": checker_name, "timeout_s": timeout_s, "log_limit": log_limit}
    config = dc.make_grader_config(
        image=image,
        volume=volume,
        lab_id=lab_id,
        placement=placement,
        cpus=cpus,
        memory_mb=memory_mb,
        name=_grader_name(env_id, prefix),
        env_id=env_id,
        prefix=prefix,
        env={**env, "LAB_DIR": f"{dc.WORKSPACE}/{lab_id}"},
    )
    config["working_dir"] = "/"
    container = client.containers.create(**config)
    try:
        payload = _tar(
            [
                ("grader", None, 0, 0o755),
                ("grader/runner.py", RUNNER.read_bytes(), 0, 0o444),
                *_lab_entries(lab_files or []),
                (f"grader/{checker_name}", checker_source, 0, 0o444),
                ("grader/job.json", json.dumps(job).encode(), 0, 0o444),
                ("key", None, 1000, 0o700),
                ("key/key", key, 1000, 0o400),
                ("out", None, 1000, 0o700),
            ]
        )
        client.api.put_archive(container.id, "/opt/labserver", payload)
        container.start()
        timed_out = False
        try:
            container.wait(timeout=timeout_s + GRACE_S)
        except Exception:  # requests' ReadTimeout / ConnectionError: stop waiting, kill it
            timed_out = True
            container.kill()
        raw = _read_member(client, container.id, dc.GRADER_OUT_DIR + "/result.json")
        runner_log = container.logs(stdout=True, stderr=True, tail=50)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
    if raw is None:
        return {"valid": False, "timed_out": timed_out, "why": "no record", "runner_log": runner_log}
    try:
        outer = json.loads(raw)
        body, mac = outer["body"], outer["mac"]
    except (ValueError, KeyError, TypeError):
        return {"valid": False, "timed_out": timed_out, "why": "unreadable record", "runner_log": runner_log}
    expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    record = json.loads(body) if hmac.compare_digest(expected, str(mac)) else None
    if record is None or record.get("nonce") != nonce:
        return {"valid": False, "timed_out": timed_out, "why": "forged record", "runner_log": runner_log}
    record["valid"] = True
    return record


def record_to_raw(record: dict[str, Any], request: CheckRequest, elapsed: float) -> CheckRaw:
    if record.get("missing"):
        raise EnvironmentGone(
            f"The lab folder {request.lab_id}/ is missing; reset the lab to get it back.",
            reason="lab-missing",
        )
    if record.get("why") == "no record":  # the runner never wrote one: the grader did not run
        raise BackendError(
            "The grader container did not run the checker.",
            reason="grader-start",
            log=repr(record.get("runner_log", b""))[-2000:],
        )
    if not record.get("valid"):
        note = f"[labserver] grader gave no valid result ({record.get('why')})\n".encode()
        return CheckRaw(
            exit_code=None,
            result=b"",
            log=note,
            log_truncated=False,
            timed_out=bool(record.get("timed_out")),
            duration_s=elapsed,
        )
    return CheckRaw(
        exit_code=record["exit_code"],
        result=base64.b64decode(record["result"]),
        log=base64.b64decode(record["log"]),
        log_truncated=bool(record["log_truncated"]),
        timed_out=bool(record["timed_out"]),
        duration_s=float(record.get("duration_s", elapsed)),
    )


READONLY_CHECKER = b"""\
import os, subprocess, sys
argv = os.environ.pop("LABSERVER_ARGV_JSON")
import json
proc = subprocess.run(json.loads(argv), stdin=subprocess.DEVNULL, capture_output=True)
sys.stdout.buffer.write(proc.stdout)
os.write(int(os.environ["LAB_RESULT_FD"]), proc.stderr)
sys.exit(proc.returncode if proc.returncode >= 0 else 128 - proc.returncode)
"""


def run_readonly(
    client: docker.DockerClient,
    *,
    env_id: str,
    image: str,
    volume: str,
    placement: Placement | None,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    timeout_s: float,
    cpus: float,
    memory_mb: int,
    prefix: str = dc.DEFAULT_PREFIX,
) -> ExecResult:
    """Run ``argv`` in a grader container that sees the workspace read-only (stdout from the log,
    stderr through the result pipe)."""
    start = time.monotonic()
    record = run_in_grader(
        client,
        env_id=env_id,
        image=image,
        volume=volume,
        placement=placement,
        lab_id=cwd,
        checker_name="readonly_exec.py",
        checker_source=READONLY_CHECKER,
        env={**env, "LABSERVER_ARGV_JSON": json.dumps(list(argv))},
        timeout_s=timeout_s,
        log_limit=16 * 1024 * 1024,
        cpus=cpus,
        memory_mb=memory_mb,
        prefix=prefix,
    )
    elapsed = time.monotonic() - start
    if record.get("missing"):
        raise FileNotFoundError(cwd)
    if not record.get("valid"):
        return ExecResult(None, b"", str(record.get("why")).encode(), bool(record.get("timed_out")), elapsed)
    return ExecResult(
        None if record["timed_out"] else record["exit_code"],
        base64.b64decode(record["log"]),
        base64.b64decode(record["result"]),
        bool(record["timed_out"]),
        elapsed,
    )
