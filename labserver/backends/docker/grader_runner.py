"""The trusted runner inside a grader container (the standard library and the image's labkit;
copied in by the server).

It is put, root-owned and read-only, at ``/opt/labserver/grader/runner.py`` together with the
checker and ``job.json``; a per-check secret key is put at ``/opt/labserver/key/key`` (uid 1000,
0400). The runner

1. marks itself non-dumpable (so code of the same uid can neither ptrace it nor open its
   ``/proc/<pid>/fd`` or ``mem``), reads the key and deletes it;
2. starts the image's check fork server (``labkit.check.zygote``: torch and labkit imported once,
   with an environment free of ``LAB_RUN_ID`` and secrets) and has it fork the checker (also
   non-dumpable) with ``LAB_RESULT_FD`` = the write end of a pipe, stdout+stderr captured as the
   log, in ``LAB_DIR`` (the read-only workspace lab folder); the checker's attendee-code children
   are forked by the same zygote, so a check imports torch once, not once per process;
3. writes ``{exit_code, result, log, log_truncated, timed_out, duration_s, nonce}`` with an
   HMAC-SHA256 of it under the key to ``/opt/labserver/out/result.json``.

The server accepts the record only if the HMAC and the nonce match, so nothing the attendee's code
prints, writes or leaves running in the grader can produce a verdict of its own: at worst it
destroys the record, which is a checker error, never a pass.
"""

import base64
import ctypes
import hashlib
import hmac
import json
import os
import sys
import threading
import time

GRADER = "/opt/labserver/grader"
KEY = "/opt/labserver/key/key"
OUT = "/opt/labserver/out/result.json"
RESULT_LIMIT = 1024 * 1024
PR_SET_DUMPABLE = 4


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

    from labkit.check import runner, zygote  # the image's labkit (root-owned, read-only)

    read_fd, write_fd = os.pipe()
    log_r, log_w = os.pipe()
    devnull = os.open(os.devnull, os.O_RDONLY)
    start = time.monotonic()
    client = zygote.start(runner.child_env(), cwd=lab_dir)
    try:
        ident = client.spawn(
            "checker",
            [os.path.join(GRADER, job["checker"])],
            cwd=lab_dir,
            env=dict(os.environ),
            fds=[devnull, log_w, log_w, write_fd],
        )
    finally:
        for fd in (write_fd, log_w, devnull):
            os.close(fd)
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
        while True:
            chunk = os.read(log_r, 65536)
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
    code, timed_out, _cpu = client.wait(ident, float(job["timeout_s"]))
    client.close()  # the zygote ends, and whatever it forked with it
    # children that escaped and keep the pipes open must not hold us up
    for t in readers:
        t.join(timeout=2.0)
    record.update(
        exit_code=code,
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
