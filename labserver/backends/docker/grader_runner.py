"""The trusted runner inside a grader container (standard library only; copied in by the server).

It is put, root-owned and read-only, at ``/opt/labserver/grader/runner.py`` together with the
checker and ``job.json``; a per-check secret key is put at ``/opt/labserver/key/key`` (uid 1000,
0400). The runner

1. marks itself non-dumpable (so code of the same uid can neither ptrace it nor open its
   ``/proc/<pid>/fd`` or ``mem``), reads the key and deletes it;
2. runs ``python -I <checker>`` (also non-dumpable) with ``LAB_RESULT_FD`` = the write end of a
   pipe, stdout+stderr captured as the log, in ``LAB_DIR`` (the read-only workspace lab folder);
3. writes ``{exit_code, result, log, log_truncated, timed_out, duration_s, nonce}`` with an
   HMAC-SHA256 of it under the key to ``/opt/labserver/out/result.json``.

The server accepts the record only if the HMAC and the nonce match, so nothing the attendee's code
prints, writes or leaves running in the grader can produce a verdict of its own: at worst it
destroys the record, which is a checker error, never a pass.
"""

import base64
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import time

GRADER = "/opt/labserver/grader"
KEY = "/opt/labserver/key/key"
OUT = "/opt/labserver/out/result.json"
RESULT_LIMIT = 1024 * 1024
PR_SET_DUMPABLE = 4

BOOT = (
    "import ctypes, runpy, sys\n"
    "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
    "path = sys.argv[1]\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(path, run_name='__main__')\n"
)


def main() -> int:
    libc = ctypes.CDLL(None)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print("grader: cannot make the runner non-dumpable", file=sys.stderr)
        return 3
    with open(KEY, "rb") as kf:
        key = kf.read()
    os.unlink(KEY)
    with open(os.path.join(GRADER, "job.json")) as f:
        job = json.load(f)
    lab_dir = os.environ.get("LAB_DIR", "")
    record = {"nonce": job["nonce"], "missing": False}
    if not os.path.isdir(lab_dir):
        record["missing"] = True
        return write(record, key)

    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["LAB_RESULT_FD"] = str(write_fd)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", BOOT, os.path.join(GRADER, job["checker"])],
        cwd=lab_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        start_new_session=True,
    )
    os.close(write_fd)
    result = bytearray()
    log = bytearray()
    state = {"truncated": False}
    limit = int(job["log_limit"])

    def pump_result() -> None:
        while True:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                return
            if len(result) < RESULT_LIMIT:
                result.extend(chunk[: RESULT_LIMIT - len(result)])

    def pump_log() -> None:
        assert proc.stdout is not None
        while True:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return
            room = limit - len(log)
            if room > 0:
                log.extend(chunk[:room])
            if len(chunk) > max(room, 0):
                state["truncated"] = True

    readers = [
        threading.Thread(target=pump_result, daemon=True),
        threading.Thread(target=pump_log, daemon=True),
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=float(job["timeout_s"]))
    except subprocess.TimeoutExpired:
        timed_out = True
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the checker's children too
    proc.wait()
    # children that escaped the process group and keep the pipes open must not hold us up
    for t in readers:
        t.join(timeout=2.0)
    record.update(
        exit_code=None if timed_out else proc.returncode,
        result=base64.b64encode(bytes(result)).decode(),
        log=base64.b64encode(bytes(log)).decode(),
        log_truncated=state["truncated"],
        timed_out=timed_out,
        duration_s=round(time.monotonic() - start, 3),
    )
    return write(record, key)


def write(record: dict, key: bytes) -> int:
    body = json.dumps(record, sort_keys=True)
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps({"body": body, "mac": mac}))
    os.replace(tmp, OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
