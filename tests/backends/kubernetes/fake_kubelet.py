"""What a kubelet and a container runtime would do for the fake API server (``fake_api.py``), with
real local processes: no kubelet, runtime or registry can run on these machines.

- **The pod's file system**: every container runs in bubblewrap (``/usr/bin/bwrap``) on an empty,
  read-only root (``readOnlyRootFilesystem``) holding the host's system folders read-only as "the
  image" (the test's venv at ``/opt/venv``, as in the cpu-emu image, whose ``ENV`` is
  :data:`IMAGE_ENV`), plus the pod's volumes at their ``mountPath`` as the pod spec says:
  a PVC is ``<root>/pvcs/<claim>`` (made when the claim is created, kept when pods go, removed
  with the claim), an emptyDir is ``<root>/pods/<pod>/<volume>`` (gone with the pod), ConfigMaps,
  Secrets and projected volumes are their keys as files (``binaryData`` and Secret ``data``
  decoded). ``readOnly`` mounts (or a claim with ``readOnly: true``) are read-only bind mounts.
  The process runs as the container's ``runAsUser`` in a user namespace, in its own pid (and,
  for ``labserver.network: "0"`` pods, network) namespace, in ``workingDir``, with the image's
  environment overlaid by the container's ``env``.
- **Exec** (:meth:`Kubelet.exec`): the command as a process in that sandbox, over the exec
  WebSocket's channels (0 stdin, 1 stdout, 2 stderr, 3 the Status with the exit code, 4 resize;
  ``v5.channel.k8s.io`` adds 255 = close a channel); ``tty=true`` gets a PTY (stderr merged into
  stdout, as the kubelet does) sized by channel 4.
- **Run-to-completion pods** (``restartPolicy: Never``, the grader): init containers one after
  the other, then the containers, each's output in its log; the phase becomes Succeeded or Failed
  with each container's exit code. Long-running pods (``restartPolicy: Always``) are not run (their
  command is ``sleep infinity``): exec runs beside it, as on a node. The readiness probe's
  ``exec`` command runs once when the pod is started.

Not mimicked (a cluster proves them): CPU, memory, pids and ephemeral-storage limits, seccomp,
capability drops beyond what a user namespace gives, NetworkPolicies beyond "no network
namespace", image pulls, node placement beyond ``kubernetes.io/hostname``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import pty
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import labkit
import pytest

from tests.backends.kubernetes.fake_ws import BINARY, CLOSE, WebSocket

BWRAP = "/usr/bin/bwrap"
IMAGE_ENV = {  # provisioning/images/Dockerfile.cpu-emu
    "PATH": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "HOME": "/home/lab",
}
IMAGE_WORKDIR, IMAGE_UID = "/workspace", 1000
IMAGE_FOLDERS = ("/tmp", "/home/lab", "/workspace", "/opt/labserver")  # made by the Dockerfile
#: host folders that are not "the image" (the pod's own /tmp, /home, /workspace come from volumes)
NOT_IMAGE = {
    "dev",
    "proc",
    "sys",
    "tmp",
    "home",
    "run",
    "workspace",
    "opt",
    "lost+found",
    "old_root",
    "mnt",
    "media",
}
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE_CHANNEL = 0, 1, 2, 3, 4, 255
#: the folder the test venv's labkit is imported from (labs/labkit of the checkout, when editable)
LABKIT_SOURCE = Path(labkit.__file__).resolve().parents[1]


def status_for(code: int | None, argv: Sequence[str], failure: str = "") -> dict[str, Any]:
    """The Status the kubelet sends on channel 3 when the command ends."""
    if failure:
        return {"metadata": {}, "status": "Failure", "message": failure, "reason": "InternalError"}
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {list(argv)}: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class Kubelet:
    def __init__(self, root: Path) -> None:
        if not os.access(BWRAP, os.X_OK):
            pytest.fail(
                f"the fake kubelet runs pods in bubblewrap: {BWRAP} is missing (apt-get install bubblewrap)"
            )
        self.root = root
        (root / "pvcs").mkdir(parents=True, exist_ok=True)
        (root / "pods").mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, set[subprocess.Popen[bytes]]] = {}  # pod -> its running processes
        self.lock = threading.Lock()
        self.execs = 0  # exec sessions started (tests read it)
        #: drop the TCP connection (RST) of an exec whose argv this says yes to, after its first output
        self.reset_after_output: Callable[[Sequence[str]], bool] = lambda argv: False
        self.hostname = os.uname().nodename

    # -- volumes ---------------------------------------------------------------------------------
    def pvc_dir(self, claim: str) -> Path:
        return self.root / "pvcs" / claim

    def pod_dir(self, pod: str) -> Path:
        return self.root / "pods" / pod

    def make_claim(self, claim: str) -> None:
        self.pvc_dir(claim).mkdir(exist_ok=True)

    def drop_claim(self, claim: str) -> None:
        shutil.rmtree(self.pvc_dir(claim), ignore_errors=True)

    def admit(self, pod: dict[str, Any], objects: Callable[[str, str], dict[str, Any] | None]) -> None:
        """Lay out the pod's volumes (``objects(plural, name)`` reads ConfigMaps and Secrets)."""
        base = self.pod_dir(pod["metadata"]["name"])
        base.mkdir(exist_ok=True)
        for vol in pod["spec"].get("volumes") or []:
            if "persistentVolumeClaim" in vol:
                continue
            where = base / vol["name"]
            where.mkdir(exist_ok=True)
            sources: list[tuple[str, str, int]] = []
            if "configMap" in vol:
                sources.append(("configmaps", vol["configMap"]["name"], 0o444))
            if "secret" in vol:
                sources.append(
                    ("secrets", vol["secret"]["secretName"], vol["secret"].get("defaultMode", 0o444))
                )
            for src in (vol.get("projected") or {}).get("sources") or []:
                if "configMap" in src:
                    sources.append(("configmaps", src["configMap"]["name"], 0o444))
                if "secret" in src:
                    sources.append(("secrets", src["secret"]["name"], 0o444))
            for plural, name, mode in sources:
                obj = objects(plural, name) or {}
                for key, value in (obj.get("data") or {}).items():
                    raw = base64.b64decode(value) if plural == "secrets" else str(value).encode()
                    (where / key).write_bytes(raw)
                    (where / key).chmod(mode)
                for key, value in (obj.get("binaryData") or {}).items():
                    (where / key).write_bytes(base64.b64decode(value))
                    (where / key).chmod(mode)

    def release(self, pod: str) -> None:
        """The pod was deleted: its processes are killed, its emptyDirs removed."""
        with self.lock:
            procs = list(self.procs.pop(pod, ()))
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self.pod_dir(pod), ignore_errors=True)

    # -- the sandbox -----------------------------------------------------------------------------
    def sandbox(self, pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
        """bwrap's arguments for ``container`` of ``pod`` (see the module docstring)."""
        spec = pod["spec"]
        args = [BWRAP, "--tmpfs", "/"]
        for entry in sorted(os.listdir("/")):
            host = Path("/") / entry
            if entry in NOT_IMAGE:
                continue
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{entry}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{entry}"]
        args += ["--ro-bind", sys.prefix, "/opt/venv"]
        for folder in IMAGE_FOLDERS:
            args += ["--dir", folder]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            vol = volumes[mount["name"]]
            claim = vol.get("persistentVolumeClaim")
            src = (
                self.pvc_dir(claim["claimName"])
                if claim
                else self.pod_dir(pod["metadata"]["name"]) / vol["name"]
            )
            readonly = mount.get("readOnly") or (claim or {}).get("readOnly")
            args += ["--ro-bind" if readonly else "--bind", str(src), mount["mountPath"]]
        # the image has labkit installed; the test venv has it editable, from the checkout, which may
        # live where "the image" has nothing (under /tmp or /home): bound in place, over the volumes
        if LABKIT_SOURCE.parts[1] in NOT_IMAGE:
            args += ["--ro-bind", str(LABKIT_SOURCE), str(LABKIT_SOURCE)]
        args += ["--dev", "/dev", "--proc", "/proc", "--remount-ro", "/"]
        security = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
        uid, gid = security.get("runAsUser", IMAGE_UID), security.get("runAsGroup", IMAGE_UID)
        args += ["--unshare-user", "--uid", str(uid), "--gid", str(gid), "--unshare-pid", "--unshare-ipc"]
        args += ["--unshare-uts", "--hostname", spec.get("hostname") or pod["metadata"]["name"][:63]]
        if (pod["metadata"].get("labels") or {}).get("labserver.network", "0") == "0":
            args += ["--unshare-net"]
        args += ["--die-with-parent", "--chdir", container.get("workingDir") or IMAGE_WORKDIR, "--clearenv"]
        env = {**IMAGE_ENV, **{e["name"]: e.get("value", "") for e in container.get("env") or []}}
        for key, value in env.items():
            args += ["--setenv", key, value]
        return [*args, "--"]

    def _track(self, pod: str, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.setdefault(pod, set()).add(proc)

    def _untrack(self, pod: str, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.get(pod, set()).discard(proc)

    def run(
        self, pod: dict[str, Any], container: dict[str, Any], argv: Sequence[str], log: Path | None = None
    ) -> int:
        """``argv`` in the container to completion (output to ``log``); the exit code."""
        name = pod["metadata"]["name"]
        out = log.open("ab") if log else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                [*self.sandbox(pod, container), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._track(name, proc)
            code = proc.wait()
            self._untrack(name, proc)
        finally:
            if log:
                out.close()  # type: ignore[union-attr]
        return code if code >= 0 else 128 - code

    # -- run-to-completion pods ------------------------------------------------------------------
    def run_pod(self, pod: dict[str, Any], set_status: Callable[[dict[str, Any]], None]) -> None:
        """Init containers, then containers (one after the other), as a thread; the phase follows."""
        name = pod["metadata"]["name"]
        logs = self.pod_dir(name) / ".logs"
        logs.mkdir(exist_ok=True)

        def go() -> None:
            inits: list[dict[str, Any]] = []
            statuses: list[dict[str, Any]] = []
            phase = "Succeeded"
            set_status({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]})
            for c in pod["spec"].get("initContainers") or []:
                code = self.run(
                    pod, c, [*c.get("command", []), *c.get("args", [])], logs / f"{c['name']}.log"
                )
                inits.append({"name": c["name"], "state": {"terminated": {"exitCode": code}}})
                if code != 0:
                    phase = "Failed"
                    break
            else:
                set_status({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]})
                for c in pod["spec"]["containers"]:
                    code = self.run(
                        pod, c, [*c.get("command", []), *c.get("args", [])], logs / f"{c['name']}.log"
                    )
                    statuses.append({"name": c["name"], "state": {"terminated": {"exitCode": code}}})
                    if code != 0:
                        phase = "Failed"
            if self.pod_dir(name).exists():  # not deleted meanwhile
                set_status({"phase": phase, "initContainerStatuses": inits, "containerStatuses": statuses})

        threading.Thread(target=go, daemon=True, name=f"fake-kubelet-{name}").start()

    def log(self, pod: str, container: str) -> bytes | None:
        path = self.pod_dir(pod) / ".logs" / f"{container}.log"
        return path.read_bytes() if path.exists() else None

    def probe(self, pod: dict[str, Any]) -> bool:
        """The readiness probe's exec command, once (True when there is none)."""
        c = pod["spec"]["containers"][0]
        command = ((c.get("readinessProbe") or {}).get("exec") or {}).get("command")
        return not command or self.run(pod, c, command) == 0

    # -- exec ------------------------------------------------------------------------------------
    def exec(
        self,
        ws: WebSocket,
        subprotocol: str,
        pod: dict[str, Any],
        container: dict[str, Any],
        argv: Sequence[str],
        *,
        tty: bool,
        stdin: bool,
        stderr: bool,
    ) -> None:
        """One exec session on ``ws`` (returns when the command ended and the status was sent)."""
        name = pod["metadata"]["name"]
        with self.lock:
            self.execs += 1
        cmd = [*self.sandbox(pod, container), *argv]
        master = -1
        if tty:
            master, slave = pty.openpty()

            def ctty() -> None:
                os.setsid()
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

            proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, preexec_fn=ctty)  # noqa: PLW1509
            os.close(slave)
            outputs = {master: STDOUT}
        else:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
                start_new_session=True,
            )
            outputs = {proc.stdout.fileno(): STDOUT}  # type: ignore[union-attr]
            if proc.stderr is not None:
                outputs[proc.stderr.fileno()] = STDERR
        self._track(name, proc)
        failed = bytearray()

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        def from_client() -> None:
            try:
                while True:
                    opcode, data = ws.recv()
                    if opcode == CLOSE:
                        return kill()  # the client went away: the kubelet ends the command
                    if not data:
                        continue
                    channel, payload = data[0], data[1:]
                    if channel == STDIN and stdin:
                        if tty:
                            os.write(master, payload)
                        elif proc.stdin is not None and not proc.stdin.closed:
                            with contextlib.suppress(BrokenPipeError, ValueError):
                                proc.stdin.write(payload)
                                proc.stdin.flush()
                    elif channel == RESIZE and tty:
                        size = json.loads(payload)
                        fcntl.ioctl(
                            master,
                            termios.TIOCSWINSZ,
                            struct.pack("HHHH", size["Height"], size["Width"], 0, 0),
                        )
                    elif channel == CLOSE_CHANNEL and subprotocol.startswith("v5") and payload[:1] == b"\0":
                        with contextlib.suppress(BrokenPipeError, AttributeError):
                            proc.stdin.close()  # type: ignore[union-attr]  # v5: stdin closed
            except (ConnectionError, OSError, ValueError):
                kill()

        reader = threading.Thread(target=from_client, daemon=True, name="fake-kubelet-exec-in")
        reader.start()
        sel = selectors.DefaultSelector()
        for fd in outputs:
            sel.register(fd, selectors.EVENT_READ)
        open_fds = set(outputs)
        try:
            while open_fds:
                for key, _ in sel.select(timeout=1.0):
                    try:
                        chunk = os.read(key.fd, 65536)
                    except OSError:  # EIO on a PTY whose other end closed
                        chunk = b""
                    if not chunk:
                        sel.unregister(key.fd)
                        open_fds.discard(key.fd)
                        continue
                    if outputs[key.fd] == STDERR and chunk.startswith(b"bwrap: execvp"):
                        failed += chunk
                        continue
                    ws.send(bytes([outputs[key.fd]]) + chunk, BINARY)
                    if self.reset_after_output(argv):  # a proxy or node going away mid-command
                        ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        ws.sock.shutdown(socket.SHUT_RD)  # wakes the reader (sends nothing)
                        reader.join(5)
                        os.close(ws.sock.detach())  # linger 0: the peer gets a RST
                        raise ConnectionResetError("reset by the test")
            code = proc.wait()
        except (ConnectionError, OSError):
            kill()
            code = proc.wait()
        finally:
            self._untrack(name, proc)
            sel.close()
            if master >= 0:
                os.close(master)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    pipe.close()  # type: ignore[union-attr]
        code = code if code >= 0 else 128 - code
        failure = ""
        if failed:
            failure = (
                f'failed to exec in container: failed to start exec: OCI runtime exec failed: exec: "{argv[0]}": '
                f"executable file not found in $PATH: unknown"
            )
        with contextlib.suppress(ConnectionError, OSError):
            ws.send(bytes([ERROR]) + json.dumps(status_for(code, argv, failure)).encode(), BINARY)
        ws.close()
