"""The Kubernetes API as the backend uses it: the official ``kubernetes`` client, JSON in and out.

- Every call runs in this object's own thread pool (the client is blocking) and answers plain
  dicts (``_preload_content=False`` + ``json.loads``), the same shapes ``manifests.py`` builds.
- A call the API server did not answer (connection refused or reset, a timeout, a 5xx gateway
  answer) is tried again through :func:`labserver.backends.base.backoff`, the project's one retry
  helper, ``LABSERVER_KUBERNETES__API_ATTEMPTS`` times in all; then :class:`ApiDown` (``api-down``).
- 404 on get / delete is "gone" (None / success); 409 on create is "exists" (:class:`Exists`);
  403 "exceeded quota" is :class:`~labserver.backends.base.ProvisionError` ``quota``.
- ``exec_blocking`` and ``open_stream`` speak the exec WebSocket (``kubernetes.stream``), each on
  an ``ApiClient`` of its own (``stream`` swaps ``call_api`` on the client it is given while it
  connects: on the shared client a concurrent GET went over a WebSocket, and two overlapping
  streams could leave it patched for good) and in a pool of their own (:data:`STREAM_WORKERS`
  threads: an exec holds its thread for as long as the command runs, so long commands never
  starve the short API calls, nor the next attendee's exec, of threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3.exceptions
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream as kstream
from websocket import WebSocketException

from labserver.backends.base import EnvironmentGone, ExecResult, ProvisionError, backoff
from labserver.backends.kubernetes import problems
from labserver.backends.kubernetes.manifests import CONTAINER
from labserver.config import KubernetesSettings
from labserver.observability import metrics

#: kind -> (API group class, method suffix)
KINDS: dict[str, tuple[str, str]] = {
    "pod": ("core", "pod"),
    "pvc": ("core", "persistent_volume_claim"),
    "secret": ("core", "secret"),
    "configmap": ("core", "config_map"),
    "serviceaccount": ("core", "service_account"),
    "networkpolicy": ("networking", "network_policy"),
}
API_WORKERS = 16  # short API calls (get, create, list, logs)
STREAM_WORKERS = 512  # exec sessions: one thread each for the command's whole run
UNREACHABLE = (
    urllib3.exceptions.HTTPError,  # MaxRetryError, ProtocolError, timeouts, NewConnectionError
    ConnectionError,
    TimeoutError,
)


class Unreachable(Exception):
    """The API server did not answer this try (retried by the backoff helper)."""


class ApiDown(ProvisionError):
    """The API server did not answer any of the tries (``reason="api-down"``)."""

    def __init__(self, log: str = "") -> None:
        super().__init__(problems.message("api-down"), reason="api-down", log=log)


class Exists(Exception):
    """409 on create: an object of that name is there already."""


def _status(exc: ApiException) -> int:
    return int(exc.status or 0)


def _body_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", ""))
    except (ValueError, AttributeError):
        return str(exc.body or exc.reason or "")


def load_configuration(cfg: KubernetesSettings) -> kclient.Configuration:
    """The client configuration: ``LABSERVER_KUBERNETES__KUBECONFIG`` (and ``CONTEXT``) when set,
    else the pod's service account (in-cluster), else ``~/.kube/config``."""
    conf = kclient.Configuration()
    if cfg.kubeconfig is not None:
        kconfig.load_kube_config(
            config_file=str(cfg.kubeconfig), context=cfg.context or None, client_configuration=conf
        )
        return conf
    try:
        kconfig.load_incluster_config(client_configuration=conf)
    except kconfig.ConfigException:
        kconfig.load_kube_config(context=cfg.context or None, client_configuration=conf)
    return conf


class KubeApi:
    def __init__(self, cfg: KubernetesSettings, configuration: kclient.Configuration | None = None) -> None:
        self.cfg = cfg
        self.namespace = cfg.namespace
        self._configuration = configuration
        self._client: kclient.ApiClient | None = None
        self._pool = ThreadPoolExecutor(max_workers=API_WORKERS, thread_name_prefix="labserver-k8s")
        self._streams = ThreadPoolExecutor(
            max_workers=STREAM_WORKERS, thread_name_prefix="labserver-k8s-exec"
        )

    @property
    def client(self) -> kclient.ApiClient:
        if self._client is None:
            conf = self._configuration or load_configuration(self.cfg)
            conf.retries = 0  # retries are ours (the backoff helper), not urllib3's
            self._client = kclient.ApiClient(conf)
        return self._client

    @property
    def core(self) -> kclient.CoreV1Api:
        return kclient.CoreV1Api(self.client)

    def _group(self, kind: str) -> tuple[Any, str]:
        group, suffix = KINDS[kind]
        api = self.core if group == "core" else kclient.NetworkingV1Api(self.client)
        return api, suffix

    async def run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``fn(*args, **kw)`` in the pool; an unanswered try is retried through ``backoff``."""
        return await self._run(self._pool, fn, args, kw)

    async def run_stream(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """As :meth:`run`, in the exec pool (for ``exec_blocking`` and ``open_stream``)."""
        return await self._run(self._streams, fn, args, kw)

    async def _run(
        self, pool: ThreadPoolExecutor, fn: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        loop = asyncio.get_running_loop()

        async def once() -> Any:
            try:
                return await loop.run_in_executor(pool, lambda: fn(*args, **kw))
            except ApiException as exc:
                metrics.ENGINE_ERRORS.labels("kubernetes", f"http-{_status(exc)}").inc()
                if _status(exc) in (0, 502, 503, 504):
                    raise Unreachable(f"{_status(exc)} {exc.reason}") from exc
                raise
            except UNREACHABLE as exc:
                metrics.ENGINE_ERRORS.labels("kubernetes", type(exc).__name__).inc()
                raise Unreachable(repr(exc)) from exc

        try:
            return await backoff(once, attempts=self.cfg.api_attempts, first=0.2, retry_on=(Unreachable,))
        except Unreachable as exc:
            raise ApiDown(log=str(exc)) from exc

    async def _json(self, method: str, kind: str, *args: Any, **kw: Any) -> Any:
        api, suffix = self._group(kind)
        fn = getattr(api, f"{method}_namespaced_{suffix}")
        resp = await self.run(
            fn, *args, self.namespace, _preload_content=False, _request_timeout=self.cfg.api_timeout_s, **kw
        )
        data = resp.data
        return json.loads(data) if data else {}

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._json("read", kind, name)
        except ApiException as exc:
            if _status(exc) == 404:
                return None
            raise

    async def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._json("create", kind, body=body)
        except ApiException as exc:
            if _status(exc) == 409:
                raise Exists(body["metadata"]["name"]) from exc
            if _status(exc) == 403 and "exceeded quota" in _body_message(exc):
                raise ProvisionError(
                    problems.message("quota"), reason="quota", log=_body_message(exc)
                ) from exc
            raise

    async def ensure(self, kind: str, body: dict[str, Any]) -> None:
        """Create ``body`` unless an object of its name exists (idempotent)."""
        with contextlib.suppress(Exists):
            await self.create(kind, body)

    async def delete(self, kind: str, name: str) -> None:
        """Delete; already gone is success."""
        try:
            await self._json("delete", kind, name, grace_period_seconds=0 if kind == "pod" else None)
        except ApiException as exc:
            if _status(exc) != 404:
                raise

    async def patch(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._json("patch", kind, name, body=body)

    async def find(self, kind: str, label_selector: str) -> list[dict[str, Any]]:
        data = await self._json("list", kind, label_selector=label_selector)
        return list(data.get("items") or [])

    async def events(self, pod: str) -> list[dict[str, Any]]:
        resp = await self.run(
            self.core.list_namespaced_event,
            self.namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
            _preload_content=False,
            _request_timeout=self.cfg.api_timeout_s,
        )
        return list(json.loads(resp.data or b"{}").get("items") or [])

    async def logs(self, pod: str, container: str, limit_bytes: int = 8 * 1024 * 1024) -> bytes:
        resp = await self.run(
            self.core.read_namespaced_pod_log,
            pod,
            self.namespace,
            container=container,
            limit_bytes=limit_bytes,
            _preload_content=False,
            _request_timeout=self.cfg.api_timeout_s,
        )
        return bytes(resp.data or b"")

    # -- the exec WebSocket --------------------------------------------------------------------
    def open_stream(self, pod: str, argv: Sequence[str], *, tty: bool, stdin: bool) -> Any:
        """A ``WSClient`` on ``argv`` in the pod's lab container (blocking; call in a thread)."""
        own = kclient.ApiClient(self.client.configuration)  # stream() patches the client it gets
        try:
            return kstream(
                kclient.CoreV1Api(own).connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                container=CONTAINER,
                command=list(argv),
                stdin=stdin,
                stdout=True,
                stderr=not tty,
                tty=tty,
                binary=True,
                _preload_content=False,
                _request_timeout=self.cfg.api_timeout_s,
            )
        except ApiException as exc:
            text = str(exc.reason or exc)
            code = _handshake_status(exc)
            if code == 404:
                raise EnvironmentGone(log=text) from exc
            if code in (401, 403):
                raise EnvironmentGone(
                    problems.message("exec-refused"), reason="exec-refused", log=text
                ) from exc
            if code is not None and 400 <= code < 500:  # answered: no host, container not running
                raise EnvironmentGone(
                    problems.message("not-running"), reason="not-running", log=text
                ) from exc
            raise  # no answer or a 5xx: nothing ran, retried by run()
        finally:
            own.close()  # its HTTP pool only: the WebSocket has a socket of its own

    def exec_blocking(
        self, pod: str, argv: Sequence[str], timeout: float, stdin: bytes | None = None
    ) -> ExecResult:
        """Run ``argv`` (killed after ``timeout`` s by coreutils ``timeout``, given up on 5 s later),
        feeding ``stdin`` when given (the command must read exactly its length: ``head -c N``)."""
        start = time.monotonic()
        wrapped = ["timeout", "-s", "TERM", "-k", "2", f"{max(timeout, 0.1):g}", *argv]
        ws = self.open_stream(pod, wrapped, tty=False, stdin=stdin is not None)
        out, err = bytearray(), bytearray()
        deadline = start + timeout + 5
        try:
            if stdin is not None:
                for i in range(0, len(stdin), 256 * 1024):
                    ws.write_stdin(stdin[i : i + 256 * 1024])
            while ws.is_open() and time.monotonic() < deadline:
                ws.update(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
                out += ws.read_channel(1) or b""
                err += ws.read_channel(2) or b""
            still_open = ws.is_open()
            out += ws.read_channel(1) or b""
            err += ws.read_channel(2) or b""
            code = None if still_open else _exit_code(ws.read_channel(3))
        except (WebSocketException, OSError) as exc:  # a reset is an OSError: never retried, it ran
            raise EnvironmentGone(problems.message("cut"), reason="cut", log=repr(exc)) from exc
        finally:
            ws.close()
        elapsed = time.monotonic() - start
        timed_out = still_open or (code in (124, 137) and elapsed >= timeout * 0.95)
        return ExecResult(None if timed_out else code, bytes(out), bytes(err), timed_out, elapsed)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._streams.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.close()


def _handshake_status(exc: ApiException) -> int | None:
    """The HTTP status the API server answered the exec handshake with (``websocket_call`` wraps
    websocket-client's error in an ``ApiException`` of status 0), or None when it did not answer."""
    if _status(exc):
        return _status(exc)
    code = getattr(exc.__context__, "status_code", None)
    if isinstance(code, int):
        return code
    m = re.search(r"Handshake status (\d{3})", str(exc.reason or ""))
    return int(m.group(1)) if m else None


def _exit_code(raw: bytes | str) -> int | None:
    """The exit status from the exec error channel (``{"status": "Success"}`` or a
    ``NonZeroExitCode`` cause); None when it says something else (the command could not start)."""
    try:
        status = json.loads(raw or "{}")
    except ValueError:
        return None
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", 1))
    return 127 if "executable file not found" in str(status.get("message", "")) else None
