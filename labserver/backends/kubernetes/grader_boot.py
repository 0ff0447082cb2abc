"""The trusted boot of a Kubernetes grader pod (standard library only; sent by the server).

Two steps, one per container of the grader pod:

``unpack`` (the init container; no attendee code has run in the pod yet): joins the lab bundle's
parts (ConfigMaps projected read-only at ``/opt/labserver/bundle``), checks their SHA-256 against
``LABSERVER_BUNDLE_SHA256``, extracts them into ``/opt/labserver/grader`` (an emptyDir that the
grader container mounts READ-ONLY, so nothing there can be changed afterwards), copies ``job.json``
and this file beside them, and puts the per-check key (from the check's Secret, which the grader
container does not mount) at ``/opt/labserver/key/key``.

``run`` (the grader container): runs the Docker grader's runner unchanged (``runner.py``: it makes
itself non-dumpable, reads and deletes the key, runs the checker and writes the HMAC-signed record
to ``/opt/labserver/out/result.json``), then prints that record on one line after :data:`MARK`; the
server reads it from the pod's log and accepts it only if the HMAC and the nonce match.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile

MARK = "LABSERVER-GRADER-RECORD "
BUNDLE = "/opt/labserver/bundle"
SECRET = "/opt/labserver/secret"
GRADER = "/opt/labserver/grader"
KEY = "/opt/labserver/key/key"
OUT = "/opt/labserver/out/result.json"


def unpack() -> int:
    parts = sorted(n for n in os.listdir(BUNDLE) if n.startswith("part-"))
    digest = hashlib.sha256()
    data = bytearray()
    for name in parts:
        with open(os.path.join(BUNDLE, name), "rb") as f:
            chunk = f.read()
        digest.update(chunk)
        data += chunk
    if digest.hexdigest() != os.environ.get("LABSERVER_BUNDLE_SHA256"):
        print("grader: the lab bundle does not match its hash", file=sys.stderr)
        return 3
    tmp = "/tmp/bundle.tar.gz"
    with open(tmp, "wb") as f:
        f.write(bytes(data))
    with tarfile.open(tmp) as tar:
        members = tar.getmembers()
        for m in members:  # the server built it, but only files and folders under GRADER go in
            parts = m.name.split("/")
            if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                print(f"grader: refused bundle member {m.name!r}", file=sys.stderr)
                return 3
        tar.extractall(GRADER, members=members)
    os.unlink(tmp)
    shutil.copyfile(os.path.join(SECRET, "job.json"), os.path.join(GRADER, "job.json"))
    shutil.copyfile(__file__, os.path.join(GRADER, "boot.py"))
    fd = os.open(KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with open(os.path.join(SECRET, "key"), "rb") as f, os.fdopen(fd, "wb") as out:
        out.write(f.read())
    return 0


def run() -> int:
    code = subprocess.call([sys.executable, "-I", os.path.join(GRADER, "runner.py")])
    try:
        with open(OUT) as f:
            record = f.read().replace("\n", " ")
    except OSError:
        print(f"grader: the runner left no record (exit {code})", file=sys.stderr)
        return 3
    sys.stdout.write("\n" + MARK + record + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(unpack() if sys.argv[1:] == ["unpack"] else run())
