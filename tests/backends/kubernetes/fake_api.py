"""An in-process fake of the Kubernetes API server, for what cannot run here (no API server binary,
no kubelet, no registry on these machines). Tests that use it are named ``test_fake_api_...``.

It is an HTTP server on 127.0.0.1 that the real ``kubernetes`` client talks to (so the backend's
whole client path runs: requests, JSON, status codes), holding objects in dicts: create (409 when
the name exists), read / delete (404 when absent), list by label selector, merge-patch with a
``resourceVersion`` precondition (409 when stale), events by involved object. What a kubelet and a
scheduler would do is the test's ``on_pod(pod) -> status`` (Ready, Unschedulable, ImagePullBackOff,
...) and ``events``.

Exec and logs are real too: ``/pods/{name}/exec`` upgrades to a WebSocket speaking
``v5.channel.k8s.io`` / ``v4.channel.k8s.io`` (``fake_ws.py``), and the command runs as a local
process in the pod's sandboxed file system, as a kubelet would run it (``fake_kubelet.py``: the
PVC a folder that outlives the pod, read-only mounts read-only, a PTY for ``tty=true``, resize on
channel 4); pods with ``restartPolicy: Never`` (the grader) run their init containers and
containers to completion, their output served by ``/pods/{name}/log``. The backend contract
suite runs against this (``factory.py``: ``kubernetes-fake_api``).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml
from kubernetes import client as kclient

from tests.backends.kubernetes.fake_kubelet import Kubelet
from tests.backends.kubernetes.fake_ws import WebSocket, accept_key

PLURALS = {
    "pods": "Pod",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
    "serviceaccounts": "ServiceAccount",
    "networkpolicies": "NetworkPolicy",
    "events": "Event",
}
PATH = re.compile(
    r"^/(?:api/v1|apis/networking\.k8s\.io/v1)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?(?:/(exec|log))?$"
)
EXEC_PROTOCOLS: tuple[str, ...] = ("v5.channel.k8s.io", "v4.channel.k8s.io")


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # thirty execs connect at once
    daemon_threads = True


VERBS = {"GET": "get", "POST": "create", "DELETE": "delete", "PATCH": "patch"}
RBAC = Path(__file__).resolve().parents[3] / "provisioning" / "kubernetes" / "base" / "rbac.yaml"


def role_rules(path: Path = RBAC) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) that the server's Role in ``provisioning/kubernetes`` grants:
    the fake answers anything else 403, as the API server would with that Role bound."""
    (role,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "Role"]
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return query.get(name, ["false"])[0].lower() in ("true", "1")


def ready(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
    }


def unschedulable(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ],
    }


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "lab", "ready": False, "state": {"waiting": {"reason": reason, "message": message}}}
        ],
    }


class FakeCluster:
    def __init__(self, root: Path | None = None) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="labserver-fake-k8s-")) if root is None else root
        self.kubelet = Kubelet(self.root)
        self.exec_protocols: tuple[str, ...] = EXEC_PROTOCOLS  # what the API server accepts, in its order
        self.rules = role_rules()  # what the server's Role grants (provisioning/kubernetes)
        self.checked: set[tuple[str, str, str]] = set()  # what the backend asked for
        self.tamper_log: Callable[[str, bytes], bytes] | None = None  # (pod, log) -> log served
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}  # (plural, name) -> object
        self.lock = threading.Lock()
        self.version = 0
        self.on_pod: Callable[[dict[str, Any]], dict[str, Any]] = ready
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.quota_exceeded = False
        self.unavailable = 0  # answer this many requests with 503 first
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.node = "node-a"
        self._ready: dict[str, dict[str, Any]] = {}  # pod -> the status on_pod gave, until started
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def _go(self, method: str) -> None:
                url = urlparse(self.path)
                with cluster.lock:
                    cluster.requests.append((method, url.path))
                    if cluster.unavailable > 0:
                        cluster.unavailable -= 1
                        return self._answer(503, {"kind": "Status", "message": "unavailable"})
                m = PATH.match(url.path)
                if not m:
                    return self._answer(404, {"kind": "Status", "message": "no such path"})
                _ns, plural, name, sub = m.groups()
                group = "networking.k8s.io" if url.path.startswith("/apis/networking") else ""
                resource = f"{plural}/{sub}" if sub else plural
                verb = "create" if sub == "exec" else VERBS[method] if name or method != "GET" else "list"
                if not cluster.allowed(group, resource, verb):
                    return self._answer(
                        403,
                        _status(
                            403,
                            "Forbidden",
                            f'{resource} "{name or ""}" is forbidden: User "system:serviceaccount:labserver:labserver" '
                            f'cannot {verb} resource "{resource}" in API group "{group}" in the namespace',
                        ),
                    )
                if sub == "exec" and plural == "pods" and method == "GET":
                    return self._exec(str(name), parse_qs(url.query))
                if sub == "log" and plural == "pods" and method == "GET":
                    return self._log(str(name), parse_qs(url.query))
                if sub:
                    return self._answer(405, {"kind": "Status", "message": f"{method} {sub}"})
                code, body = cluster.handle(
                    method,
                    plural,
                    name,
                    parse_qs(url.query),
                    self._body() if method in ("POST", "PATCH") else {},
                )
                self._answer(code, body)

            def _pod_or_answer(self, name: str) -> dict[str, Any] | None:
                with cluster.lock:
                    pod = cluster.objects.get(("pods", name))
                    pod = json.loads(json.dumps(pod)) if pod else None
                if pod is None:
                    self._answer(404, _status(404, "NotFound", f'pods "{name}" not found'))
                return pod

            def _exec(self, name: str, query: dict[str, list[str]]) -> None:
                pod = self._pod_or_answer(name)
                if pod is None:
                    return
                if not pod["spec"].get("nodeName"):
                    return self._answer(
                        400, _status(400, "BadRequest", f"pod {name} does not have a host assigned")
                    )
                wanted = query.get("container", [""])[0] or pod["spec"]["containers"][0]["name"]
                container = next((c for c in pod["spec"]["containers"] if c["name"] == wanted), None)
                if container is None:
                    return self._answer(
                        400, _status(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
                    )
                if (pod.get("status") or {}).get("phase") != "Running":
                    return self._answer(
                        400,
                        _status(
                            400, "BadRequest", f"container not found ({wanted!r}): the pod is not running"
                        ),
                    )
                offered = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
                chosen = next((p for p in offered if p in cluster.exec_protocols), None)
                key = self.headers.get("Sec-WebSocket-Key")
                if (
                    "websocket" not in (self.headers.get("Upgrade") or "").lower()
                    or not key
                    or chosen is None
                ):
                    return self._answer(400, _status(400, "BadRequest", "Upgrade request required"))
                self.send_response(101, "Switching Protocols")
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept_key(key))
                self.send_header("Sec-WebSocket-Protocol", chosen)
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True
                cluster.kubelet.exec(
                    WebSocket(self.connection, self.rfile),
                    chosen,
                    pod,
                    container,
                    query.get("command", []),
                    tty=_flag(query, "tty"),
                    stdin=_flag(query, "stdin"),
                    stderr=_flag(query, "stderr") and not _flag(query, "tty"),
                )

            def _log(self, name: str, query: dict[str, list[str]]) -> None:
                pod = self._pod_or_answer(name)
                if pod is None:
                    return
                wanted = query.get("container", [""])[0] or pod["spec"]["containers"][0]["name"]
                data = cluster.kubelet.log(name, wanted)
                if data is None:
                    return self._answer(
                        400,
                        _status(
                            400, "BadRequest", f'container "{wanted}" in pod "{name}" is waiting to start'
                        ),
                    )
                if cluster.tamper_log is not None:
                    data = cluster.tamper_log(name, data)
                limit = int(query.get("limitBytes", ["0"])[0] or 0)
                data = data[:limit] if limit else data
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._go("GET")

            def do_POST(self) -> None:
                self._go("POST")

            def do_DELETE(self) -> None:
                self._go("DELETE")

            def do_PATCH(self) -> None:
                self._go("PATCH")

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def allowed(self, group: str, resource: str, verb: str) -> bool:
        with self.lock:
            self.checked.add((group, resource, verb))
            return (group, resource, verb) in self.rules

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def configuration(self) -> kclient.Configuration:
        conf = kclient.Configuration()
        conf.host = self.url
        return conf

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        for pod in self.names("pods"):
            self.kubelet.release(pod)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- the API ---------------------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def handle(
        self, method: str, plural: str, name: str | None, query: dict[str, list[str]], body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        code, answer = self._handle(method, plural, name, query, body)
        done = (method, plural, code)
        if done == ("POST", "persistentvolumeclaims", 201):
            self.kubelet.make_claim(answer["metadata"]["name"])
        elif done == ("DELETE", "persistentvolumeclaims", 200):
            self.kubelet.drop_claim(answer["metadata"]["name"])
        elif done == ("DELETE", "pods", 200):
            self.kubelet.release(answer["metadata"]["name"])
        elif done == ("POST", "pods", 201) and answer["spec"].get("nodeName"):
            self._start(answer)
            answer = self._copy("pods", answer["metadata"]["name"]) or answer
        return code, answer

    def _schedule(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The test's ``on_pod`` says whether a node takes the pod; a missing claim or a node
        selector naming another node keeps it Pending, as the scheduler would."""
        status = self.on_pod(pod)
        if status.get("phase") != "Running":
            return status
        for vol in pod["spec"].get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and ("persistentvolumeclaims", claim) not in self.objects:
                return unschedulable(f'persistentvolumeclaim "{claim}" not found')
        host = (pod["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if host and host != self.node:
            return unschedulable(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
            )
        pod["spec"]["nodeName"] = self.node
        self._ready[pod["metadata"]["name"]] = status
        return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}

    def _start(self, pod: dict[str, Any]) -> None:
        """What the kubelet does with a pod bound to its node (outside the API's lock)."""
        name = pod["metadata"]["name"]
        with self.lock:
            ready_status = self._ready.pop(name, None) or ready(pod)
        self.kubelet.admit(pod, lambda plural, n: self._copy(plural, n))
        if pod["spec"].get("restartPolicy") == "Never":
            self.kubelet.run_pod(pod, lambda status: self.set_pod_status(name, status))
            return
        if not self.kubelet.probe(pod):
            ready_status = {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"},
                ],
            }
        self.set_pod_status(name, ready_status)

    def _copy(self, plural: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((plural, name))
            return json.loads(json.dumps(obj)) if obj else None

    def _handle(
        self, method: str, plural: str, name: str | None, query: dict[str, list[str]], body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if plural == "events":
                pod = query.get("fieldSelector", [""])[0].rsplit("involvedObject.name=", 1)[-1]
                return 200, {"kind": "EventList", "items": list(self.events.get(pod, []))}
            if method == "GET" and name is None:
                sel = dict(p.split("=", 1) for p in query.get("labelSelector", [""])[0].split(",") if p)
                items = [
                    o
                    for (pl, _), o in sorted(self.objects.items())
                    if pl == plural
                    and all(o["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())
                ]
                return 200, {"kind": PLURALS[plural] + "List", "items": items}
            key = (plural, name or body.get("metadata", {}).get("name", ""))
            if method == "POST":
                if key in self.objects:
                    return 409, {"kind": "Status", "reason": "AlreadyExists", "message": f"{key[1]} exists"}
                if plural == "pods" and self.quota_exceeded:
                    return 403, {
                        "kind": "Status",
                        "reason": "Forbidden",
                        "message": f'pods "{key[1]}" is forbidden: exceeded quota: labserver, requested: pods=1, used: pods=40, limited: pods=40',
                    }
                obj = json.loads(json.dumps(body))
                self._bump(obj)
                if plural == "pods":
                    obj["status"] = self._schedule(obj)
                self.objects[key] = obj
                return 201, obj
            if key not in self.objects:
                return 404, {"kind": "Status", "reason": "NotFound", "message": f"{key[1]} not found"}
            if method == "GET":
                return 200, self.objects[key]
            if method == "DELETE":
                return 200, self.objects.pop(key)
            if method == "PATCH":
                obj = self.objects[key]
                want = body.get("metadata", {}).get("resourceVersion")
                if want and want != obj["metadata"]["resourceVersion"]:
                    return 409, {
                        "kind": "Status",
                        "reason": "Conflict",
                        "message": "the object has been modified",
                    }
                for part in ("labels", "annotations"):
                    obj["metadata"].setdefault(part, {}).update(body.get("metadata", {}).get(part, {}))
                self._bump(obj)
                return 200, obj
        return 405, {"kind": "Status", "message": "method"}

    # -- what a kubelet would do -----------------------------------------------------------------
    def set_pod_status(self, name: str, status: dict[str, Any]) -> None:
        with self.lock:
            if ("pods", name) in self.objects:  # a pod deleted meanwhile stays gone
                self.objects[("pods", name)]["status"] = status

    def names(self, plural: str) -> list[str]:
        with self.lock:
            return sorted(n for pl, n in self.objects if pl == plural)

    def count(self, method: str, plural: str) -> int:
        with self.lock:
            return sum(
                1
                for m, p in self.requests
                if m == method and p.split("/")[-1 if method == "POST" else -2] == plural
            )
