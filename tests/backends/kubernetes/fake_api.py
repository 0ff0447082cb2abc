"""An in-process fake of the Kubernetes API server, for what cannot run here (no API server binary,
no kubelet, no registry on these machines). Tests that use it are named ``test_fake_api_...``.

It is an HTTP server on 127.0.0.1 that the real ``kubernetes`` client talks to (so the backend's
whole client path runs: requests, JSON, status codes), holding objects in dicts: create (409 when
the name exists), read / delete (404 when absent), list by label selector, merge-patch with a
``resourceVersion`` precondition (409 when stale), events by involved object. What a kubelet and a
scheduler would do is the test's ``on_pod(pod) -> status`` (Ready, Unschedulable, ImagePullBackOff,
...) and ``events``. No exec: exec, terminals, files and checks are held to the contract on a real
cluster (``make test-kubernetes``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client as kclient

PLURALS = {
    "pods": "Pod",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
    "serviceaccounts": "ServiceAccount",
    "networkpolicies": "NetworkPolicy",
    "events": "Event",
}
PATH = re.compile(r"^/(?:api/v1|apis/networking\.k8s\.io/v1)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$")


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
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}  # (plural, name) -> object
        self.lock = threading.Lock()
        self.version = 0
        self.on_pod: Callable[[dict[str, Any]], dict[str, Any]] = ready
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.quota_exceeded = False
        self.unavailable = 0  # answer this many requests with 503 first
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.node = "node-a"
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
                _ns, plural, name = m.groups()
                code, body = cluster.handle(
                    method,
                    plural,
                    name,
                    parse_qs(url.query),
                    self._body() if method in ("POST", "PATCH") else {},
                )
                self._answer(code, body)

            def do_GET(self) -> None:
                self._go("GET")

            def do_POST(self) -> None:
                self._go("POST")

            def do_DELETE(self) -> None:
                self._go("DELETE")

            def do_PATCH(self) -> None:
                self._go("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

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

    # -- the API ---------------------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def handle(
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
                    obj["status"] = self.on_pod(obj)
                    if obj["status"].get("phase") == "Running":
                        obj["spec"]["nodeName"] = self.node
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
