"""The Kubernetes backend: one hardened pod and one workspace PVC per attendee, in one namespace.

- Placement, quotas, node failure and card accounting belong to Kubernetes: a pod that holds a card
  asks the device plugin's resource (``manifests.resources_for``); the scheduler (the default one or
  Volcano) finds it a node. Names are deterministic (``<prefix>-e-<escaped env id>``, PVC
  ``<prefix>-ws-<escaped env id>``) and every object carries ``labserver.*`` labels, so ``create`` is
  idempotent and ``discover`` re-adopts pods after a restart; the env id itself is an annotation.
- ``create`` waits for Ready through the one backoff helper, reporting progress from the pod's
  events (Scheduled, Pulling, Started); what went wrong is read by ``problems.diagnose``
  (Unschedulable, image pull, eviction, crash loop; quota and an unreachable API from ``api.py``),
  each with a message in English and Chinese. No card free and the lab allows CPU emulation: the
  pod is made again without a card and the attendee is told (``cpu-fallback``).
- ``stop`` deletes the pod and keeps the PVC; ``create`` makes the pod again (on any node). An
  evicted pod (node lost) is replaced the same way: the instructor's Restart, or the attendee's
  next start. ``destroy`` removes pod and PVC; gone is success.
- Exec, terminals and files use the exec WebSocket (files as shell snippets shared with Docker,
  resolved inside the pod so no symlink leads out; writes as a tar on stdin); checks run in a
  grader pod (``grader.py``).

Capabilities beyond :class:`~labserver.backends.base.Backend`: ``Stoppable``, ``WarmPooled``,
``Closable``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from labserver.backends.base import (
    MAX_ARCHIVE_BYTES,
    MAX_READ_BYTES,
    BackendError,
    CheckRaw,
    CheckRequest,
    EnvironmentGone,
    EnvRef,
    EnvSpec,
    EnvState,
    EnvStatus,
    ExecResult,
    FileEntry,
    LabSeed,
    PathRefused,
    ProgressCallback,
    ProvisionError,
    TooBig,
    WorkspaceFull,
    backoff,
    safe_relpath,
)
from labserver.backends.docker import files
from labserver.backends.docker.grader import grader_lab_files, record_to_raw
from labserver.backends.kubernetes import grader, problems
from labserver.backends.kubernetes import manifests as km
from labserver.backends.kubernetes.api import ApiDown, Exists, KubeApi
from labserver.backends.kubernetes.terminal import KubeTerminal
from labserver.config import Settings

log = logging.getLogger(__name__)


class NotYet(Exception):
    """The pod is not Ready yet (the backoff helper polls again)."""


async def _quiet(phase: str, message: str) -> None:
    return None


class KubernetesBackend:
    name = "kubernetes"

    def __init__(self, settings: Settings, *, configuration: Any = None, prefix: str | None = None) -> None:
        self.settings = settings
        self.cfg = settings.kubernetes
        self.prefix = prefix or self.cfg.name_prefix or km.DEFAULT_PREFIX
        self.api = KubeApi(self.cfg, configuration)
        self._locks: dict[str, asyncio.Lock] = {}
        self._ready_namespace = False
        self._warm: dict[int, tuple[EnvSpec, int]] = {}
        self.poll_s = 0.5

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    # -- references ----------------------------------------------------------------------------
    def _ref(self, pod: Mapping[str, Any]) -> EnvRef:
        meta = pod.get("metadata") or {}
        ann, lab = meta.get("annotations") or {}, meta.get("labels") or {}
        pvc = next(
            (
                v["persistentVolumeClaim"]["claimName"]
                for v in (pod.get("spec") or {}).get("volumes") or []
                if v.get("name") == "workspace" and v.get("persistentVolumeClaim")
            ),
            "",
        )
        return EnvRef(
            env_id=str(ann.get(km.ANNOTATION_ENV, "")),
            backend=self.name,
            infra_id=str(meta.get("name", "")),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            device=str(lab.get("labserver.device", "cpu-emu")),
            data={
                "pod": meta.get("name", ""),
                "pvc": pvc,
                "image": ann.get("labserver.image", ""),
                "notice": ann.get(km.ANNOTATION_NOTICE, ""),
                "cpus": float(ann.get("labserver.cpus") or 1),
                "memory_mb": int(ann.get("labserver.memory_mb") or 2048),
            },
        )

    @staticmethod
    def _pod(ref: EnvRef) -> str:
        return str(ref.data.get("pod") or ref.infra_id)

    # -- lifecycle -----------------------------------------------------------------------------
    async def _namespace_objects(self) -> None:
        if self._ready_namespace:
            return
        await self.api.ensure("serviceaccount", km.make_service_account(self.prefix))
        for policy in km.make_network_policies(self.cfg, self.prefix):
            await self.api.ensure("networkpolicy", policy)
        self._ready_namespace = True

    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        """See :meth:`labserver.backends.base.Backend.create`: reuse the pod of ``spec.env_id``
        (replacing it when it failed or was evicted, keeping the PVC), else claim a warm one, else
        make PVC and pod; wait for Ready; seed missing lab folders."""
        say = progress or _quiet
        async with self._lock(spec.env_id):
            try:
                return await self._create(spec, say)
            except BackendError:
                raise
            except ApiException as exc:
                raise ProvisionError(
                    "Your environment could not be started. The instructor can see why.\n"
                    "您的环境无法启动。讲师可以查看原因。",
                    reason="kubernetes",
                    log=f"{exc.status} {exc.reason}: {exc.body}",
                ) from exc

    async def _create(self, spec: EnvSpec, say: ProgressCallback) -> EnvRef:
        await self._namespace_objects()
        await say("placing", "Looking for your environment")
        name = km.pod_name(spec.env_id, self.prefix)
        pod = await self.api.get("pod", name)
        if pod is not None and (
            (pod.get("metadata") or {}).get("deletionTimestamp") or problems.diagnose(pod) is not None
        ):
            await self.api.delete("pod", name)  # evicted or failed: a new pod, the same PVC
            await self._wait_gone(name)
            pod = None
        if pod is None:
            claim = await self._claim_of(spec.env_id)  # a stopped or evicted attendee's own files
            if claim is None:
                pod = await self._claim_warm(spec, say)
            if pod is None:
                if claim is None:
                    claim = km.pvc_name(spec.env_id, self.prefix)
                    await self.api.ensure("pvc", km.make_pvc(spec, self.cfg, prefix=self.prefix))
                pod = await self._make_pod(spec, card=km.wants_card(spec, self.cfg), say=say, pvc=claim)
        pod = await self._wait_ready(pod, spec, say)
        ref = self._ref(pod)
        await self._seed(self._pod(ref), spec.labs, say)
        await say("ready", "Your environment is ready")
        return ref

    async def _claim_of(self, env_id: str) -> str | None:
        """The name of the environment's workspace claim if it has one: its own
        (``<prefix>-ws-<env>``), or the warm pod's claim it took over (labelled with its env id)."""
        own = km.pvc_name(env_id, self.prefix)
        if await self.api.get("pvc", own) is not None:
            return own
        found = await self.api.find(
            "pvc", km.selector(self.prefix, **{km.LABEL_ENV_NAME: km.label_value(env_id)})
        )
        names = [
            p["metadata"]["name"]
            for p in found
            if (p["metadata"].get("annotations") or {}).get(km.ANNOTATION_ENV) == env_id
        ]
        return names[0] if names else None

    async def _make_pod(
        self, spec: EnvSpec, *, card: bool, say: ProgressCallback, pvc: str, notice: str = ""
    ) -> dict[str, Any]:
        await say("creating", "Creating your environment")
        body = km.make_pod(spec, self.cfg, card=card, pvc=pvc, prefix=self.prefix, notice=notice)
        try:
            return await self.api.create("pod", body)
        except Exists:
            return await self.api.get("pod", body["metadata"]["name"]) or body

    async def _wait_gone(self, name: str) -> None:
        async def gone() -> None:
            if await self.api.get("pod", name) is not None:
                raise NotYet(name)

        try:
            await backoff(gone, attempts=60, first=self.poll_s, factor=1.0, retry_on=(NotYet,))
        except NotYet as exc:
            raise ProvisionError(
                problems.message("timeout"), reason="timeout", log=f"{name} not deleted"
            ) from exc

    async def _wait_ready(self, pod: dict[str, Any], spec: EnvSpec, say: ProgressCallback) -> dict[str, Any]:
        """Poll the pod until Ready (progress from its events), through the backoff helper; a
        problem ends the wait (the pod is deleted, the PVC kept) with its message."""
        name = pod["metadata"]["name"]
        seen: set[str] = set()
        current = {"pod": pod}

        async def poll() -> dict[str, Any]:
            now = await self.api.get("pod", current["pod"]["metadata"]["name"])
            if now is None:
                raise ProvisionError(problems.message("evicted"), reason="evicted", log=f"{name} vanished")
            with contextlib.suppress(ApiException):  # events are progress, not a condition
                for phase, message in problems.progress_of(await self.api.events(name), seen):
                    await say(phase, message)
            problem = problems.diagnose(now, self.cfg.npu_resource)
            if problem is not None:
                return await self._on_problem(now, problem, spec, say, current)
            if not problems.is_ready(now):
                raise NotYet(name)
            return now

        attempts = max(1, int(self.cfg.ready_timeout_s / self.poll_s))
        try:
            return await backoff(poll, attempts=attempts, first=self.poll_s, factor=1.0, retry_on=(NotYet,))
        except NotYet as exc:
            await self.api.delete("pod", name)
            raise ProvisionError(
                problems.message("timeout"), reason="timeout", log=f"{name} not Ready"
            ) from exc

    async def _on_problem(
        self,
        pod: dict[str, Any],
        problem: problems.Problem,
        spec: EnvSpec,
        say: ProgressCallback,
        current: dict[str, Any],
    ) -> dict[str, Any]:
        name = pod["metadata"]["name"]
        holds_card = pod["metadata"].get("labels", {}).get("labserver.device") == "npu"
        if problem.reason == "no-card" and holds_card and spec.device == "any" and self.cfg.cpu_fallback:
            await self.api.delete("pod", name)
            await self._wait_gone(name)
            notice = problems.message("cpu-fallback")
            await say("notice", notice)
            claim = self._ref(pod).data["pvc"] or km.pvc_name(spec.env_id, self.prefix)
            current["pod"] = await self._make_pod(spec, card=False, say=say, pvc=claim, notice=notice)
            raise NotYet(name)
        if problem.reason == "no-card" and spec.device == "any" and holds_card:
            problem = problems.Problem("no-card", problem.detail)  # the operator turned fallback off
        await self.api.delete("pod", name)
        # no card / no room: the admission queue tries again when room frees ("no-room")
        reason = (
            "no-room" if problem.reason in ("no-room", "no-card") and spec.device != "npu" else problem.reason
        )
        raise ProvisionError(problem.message, reason=reason, log=f"{name}: {problem.detail}")

    async def _seed(self, pod: str, labs: Sequence[LabSeed], say: ProgressCallback) -> None:
        if not labs:
            return
        ids = [safe_relpath(lab.lab_id) for lab in labs]
        res = await self._exec_pod(
            pod, ["sh", "-c", 'for d; do [ -e "/workspace/$d" ] || echo "$d"; done', "sh", *ids], 60
        )
        missing = set(res.stdout.decode().split())
        for lab in labs:
            if lab.lab_id in missing:
                await say("seeding", f"Copying the {lab.lab_id} starter files")
                tar = await asyncio.to_thread(files.seed_tar, lab.lab_id, lab.starter)
                await self._untar(pod, tar)

    async def _untar(self, pod: str, data: bytes) -> None:
        script = 'head -c "$1" | tar -x -m --no-same-owner --no-same-permissions -C /workspace -f -'
        res = await self._exec_pod(pod, ["sh", "-c", script, "sh", str(len(data))], 120, stdin=data)
        if res.exit_code != 0:
            text = res.stderr.decode(errors="replace")
            if files.NO_SPACE in text.lower():
                raise WorkspaceFull()
            raise OSError(f"could not write into the workspace: {text.strip() or res.exit_code}")

    async def status(self, ref: EnvRef) -> EnvStatus:
        notice = str(ref.data.get("notice") or "")

        def st(state: EnvState, message: str = "") -> EnvStatus:
            return EnvStatus(state, message or notice, node=ref.node, device=ref.device)

        try:
            pod = await self.api.get("pod", self._pod(ref))
        except ApiDown as exc:
            return st(EnvState.failed, exc.message)
        except ApiException as exc:
            return st(EnvState.failed, f"The cluster answered {exc.status} {exc.reason}.")
        if pod is None:
            return st(EnvState.stopped, "The pod is gone (the workspace is kept until it is destroyed).")
        problem = problems.diagnose(pod, self.cfg.npu_resource)
        if problem is not None:
            return st(EnvState.failed, problem.message)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return st(EnvState.stopped, "Stopping")
        if problems.is_ready(pod):
            return st(EnvState.ready)
        return st(EnvState.provisioning, "Starting")

    async def destroy(self, ref: EnvRef) -> None:
        pod = self._pod(ref)
        pvc = str(ref.data.get("pvc") or km.pvc_name(ref.env_id, self.prefix))
        await self.api.delete("pod", pod)
        await self.api.delete("pvc", pvc)

    async def stop(self, ref: EnvRef) -> None:
        """Delete the pod, keep the PVC (``create`` makes the pod again, on any node)."""
        await self.api.delete("pod", self._pod(ref))
        await self._wait_gone(self._pod(ref))

    async def discover(self) -> list[EnvRef]:
        pods = await self.api.find("pod", km.selector(self.prefix, **{km.LABEL_ROLE: "env"}))
        refs = [
            self._ref(p)
            for p in pods
            if (p.get("metadata") or {}).get("annotations", {}).get(km.ANNOTATION_ENV)
        ]
        return sorted(refs, key=lambda r: r.env_id)

    # -- warm pool -----------------------------------------------------------------------------
    async def prepare_event(self, event_id: int, template: EnvSpec, size: int | None = None) -> int:
        """Keep ``size`` (default ``LABSERVER_DOCKER__WARM_POOL``, the server's warm pool setting)
        ready pods for the event, made from ``template``; 0 removes the unclaimed ones. A claim
        relabels a warm pod with the attendee's env id under its resourceVersion (a second claimer
        of the same pod gets 409 and takes the next), so each warm pod goes to one attendee."""
        size = self.settings.docker.warm_pool if size is None else size
        warm = await self.api.find(
            "pod", km.selector(self.prefix, **{km.LABEL_ROLE: "warm", km.LABEL_EVENT: str(event_id)})
        )
        if size <= 0:
            self._warm.pop(event_id, None)
            for pod in warm:
                await self._drop(pod)
            return 0
        self._warm[event_id] = (template, size)
        made = 0
        await self._namespace_objects()
        for _ in range(size - len(warm)):
            serial = secrets.token_hex(4)
            spec = EnvSpec(**{**template.__dict__, "env_id": f"warm-{event_id}-{serial}", "attendee_id": 0})
            pvc = km.warm_name(event_id, serial, self.prefix)
            await self.api.ensure("pvc", km.make_pvc(spec, self.cfg, name=pvc, prefix=self.prefix))
            body = km.make_pod(
                spec,
                self.cfg,
                card=km.wants_card(spec, self.cfg),
                name=pvc,
                pvc=pvc,
                role="warm",
                prefix=self.prefix,
            )
            await self.api.ensure("pod", body)
            made += 1
        return made

    async def _drop(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        await self.api.delete("pod", meta.get("name", ""))
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            if vol.get("persistentVolumeClaim"):
                await self.api.delete("pvc", vol["persistentVolumeClaim"]["claimName"])

    async def _claim_warm(self, spec: EnvSpec, say: ProgressCallback) -> dict[str, Any] | None:
        if spec.event_id not in self._warm:
            return None
        pods = await self.api.find(
            "pod", km.selector(self.prefix, **{km.LABEL_ROLE: "warm", km.LABEL_EVENT: str(spec.event_id)})
        )
        for pod in pods:
            meta = pod["metadata"]
            ann = meta.get("annotations") or {}
            if ann.get("labserver.image") != spec.image or not problems.is_ready(pod):
                continue
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "labels": {
                        km.LABEL_ROLE: "env",
                        km.LABEL_ENV_NAME: km.label_value(spec.env_id),
                        "labserver.attendee": str(spec.attendee_id),
                    },
                    "annotations": {km.ANNOTATION_ENV: spec.env_id},
                }
            }
            try:
                claimed = await self.api.patch("pod", meta["name"], patch)
            except ApiException as exc:
                if exc.status in (404, 409):
                    continue  # another claimer was first
                raise
            claim = self._ref(claimed).data["pvc"]
            if claim:  # the claim follows its attendee through stop and eviction (_claim_of)
                labels = {km.LABEL_ENV_NAME: km.label_value(spec.env_id)}
                await self.api.patch(
                    "pvc",
                    claim,
                    {"metadata": {"labels": labels, "annotations": {km.ANNOTATION_ENV: spec.env_id}}},
                )
            await say("claimed", "A ready environment was waiting for you")
            return claimed
        return None

    # -- processes -----------------------------------------------------------------------------
    async def _exec_pod(
        self, pod: str, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None
    ) -> ExecResult:
        try:
            return await self.api.run_stream(self.api.exec_blocking, pod, list(argv), timeout, stdin)
        except ApiDown as exc:
            raise EnvironmentGone(exc.message, reason="api-down", log=exc.log) from exc

    async def exec(
        self,
        ref: EnvRef,
        argv: Sequence[str],
        *,
        timeout: float = 60.0,
        readonly: bool = False,
        cwd: str = "",
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        rel = safe_relpath(cwd) if cwd else ""
        if readonly:
            raw = await self._grade(
                ref,
                lab_id=rel,
                checker_name="readonly_exec.py",
                source=grader.READONLY_CHECKER,
                lab_files=[],
                env={**dict(env or {}), "LABSERVER_ARGV_JSON": json.dumps(list(argv))},
                timeout_s=timeout,
                log_limit=16 * 1024 * 1024,
            )
            if raw.get("missing"):
                raise FileNotFoundError(cwd)
            if not raw.get("valid"):
                return ExecResult(None, b"", str(raw.get("why")).encode(), bool(raw.get("timed_out")), 0.0)
            return ExecResult(
                None if raw["timed_out"] else raw["exit_code"],
                base64.b64decode(raw["log"]),
                base64.b64decode(raw["result"]),
                bool(raw["timed_out"]),
                float(raw.get("duration_s", 0.0)),
            )
        workdir = await self._resolve(ref, rel) if rel else km.WORKSPACE
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        return await self._exec_pod(self._pod(ref), ["env", "-C", workdir, *envs, *argv], timeout)

    async def _require_running(self, ref: EnvRef) -> None:
        status = await self.status(ref)
        if status.state != EnvState.ready:
            raise EnvironmentGone(status.message or "Your environment is not running.")

    async def _grade(
        self,
        ref: EnvRef,
        *,
        lab_id: str,
        checker_name: str,
        source: bytes,
        lab_files: list[tuple[str, bytes]],
        env: dict[str, str],
        timeout_s: float,
        log_limit: int,
    ) -> dict[str, Any]:
        await self._require_running(ref)
        blob = await asyncio.to_thread(grader.bundle, lab_files, checker_name, source)
        digest, maps = grader.bundle_configmaps(blob, self.prefix)
        for cm in maps:
            await self.api.ensure("configmap", cm)
        job, key = grader.new_job(checker_name, timeout_s, log_limit)
        name = km.grader_name(ref.env_id, secrets.token_hex(4), self.prefix)
        await self.api.create("secret", grader.make_secret(name, job=job, key=key, prefix=self.prefix))
        try:
            pod = grader.make_grader_pod(
                name=name,
                env_id=ref.env_id,
                image=str(ref.data.get("image") or self.settings.docker.image),
                pvc=str(ref.data.get("pvc") or km.pvc_name(ref.env_id, self.prefix)),
                node=ref.node,
                lab_id=lab_id,
                env=env,
                cpus=float(ref.data.get("cpus") or 1.0),
                memory_mb=int(ref.data.get("memory_mb") or 2048),
                bundle_sha=digest,
                bundle_maps=[m["metadata"]["name"] for m in maps],
                secret=name,
                cfg=self.cfg,
                prefix=self.prefix,
            )
            await self.api.create("pod", pod)
            done = await self._wait_done(name, timeout_s + grader.GRACE_S)
            log_bytes = b""
            if done is not None:
                try:
                    log_bytes = await self.api.logs(name, "grader")
                except ApiException as exc:  # the grader container never started (init failed)
                    log.warning("grader pod %s: no log (%s): %s", name, exc.status, grader.ended(done))
        finally:
            await self.api.delete("pod", name)
            await self.api.delete("secret", name)
        if done is None:
            return {"valid": False, "timed_out": True, "why": "grader pod did not finish"}
        if not log_bytes:
            return {"valid": False, "timed_out": False, "why": f"grader pod failed: {grader.ended(done)}"}
        return grader.verify(log_bytes, key, job["nonce"])

    async def _wait_done(self, name: str, within_s: float) -> dict[str, Any] | None:
        """The grader pod once it ended (Succeeded or Failed); None when it did not in time."""

        async def done() -> dict[str, Any]:
            pod = await self.api.get("pod", name)
            if pod is None:
                raise EnvironmentGone("The grader pod vanished.", reason="grader")
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                raise NotYet(name)
            return pod

        try:
            return await backoff(
                done,
                attempts=max(1, int(within_s / self.poll_s)),
                first=self.poll_s,
                factor=1.0,
                retry_on=(NotYet,),
            )
        except NotYet:
            return None

    async def run_check(self, ref: EnvRef, request: CheckRequest) -> CheckRaw:
        source = await asyncio.to_thread(request.checker.read_bytes)
        lab_files, checker_name = await asyncio.to_thread(grader_lab_files, request.checker)
        start = time.monotonic()
        record = await self._grade(
            ref,
            lab_id=safe_relpath(request.lab_id),
            checker_name=checker_name,
            source=source,
            lab_files=lab_files,
            env=dict(request.env),
            timeout_s=request.timeout_s,
            log_limit=request.log_limit,
        )
        return record_to_raw(record, request, time.monotonic() - start)

    async def terminal(self, ref: EnvRef, cols: int, rows: int, *, cwd: str = "") -> KubeTerminal:
        workdir = km.WORKSPACE
        if cwd:
            with contextlib.suppress(FileNotFoundError, PathRefused):
                workdir = await self._resolve(ref, cwd)
        argv = ["env", "-C", workdir, "PS1=\\W$ ", "bash", "-l"]
        ws = await self.api.run_stream(self.api.open_stream, self._pod(ref), argv, tty=True, stdin=True)
        term = KubeTerminal(ws)
        await term.resize(cols, rows)
        return term

    # -- files ---------------------------------------------------------------------------------
    async def _sh(self, ref: EnvRef, script: str, *args: str, timeout: float = 60.0) -> ExecResult:
        return await self._exec_pod(self._pod(ref), ["sh", "-c", script, "sh", *args], timeout)

    async def _resolve(self, ref: EnvRef, rel: str) -> str:
        result = await self._sh(ref, files.RESOLVE, files.abs_path(rel))
        _raise_for(result, rel)
        return result.stdout.decode().strip()

    async def list_files(self, ref: EnvRef, path: str) -> list[FileEntry]:
        rel = safe_relpath(path)
        result = await self._sh(ref, files.LIST, files.abs_path(rel))
        if result.exit_code not in (0, 1) or (result.exit_code == 1 and not result.stdout):
            _raise_for(result, rel)
        return files.parse_listing(result.stdout, rel)

    async def read_file(self, ref: EnvRef, path: str) -> bytes:
        rel = safe_relpath(path)
        if not rel:
            raise IsADirectoryError(path)
        result = await self._sh(ref, files.READ, files.abs_path(rel), str(MAX_READ_BYTES))
        if result.exit_code == 1 and b"Permission denied" in result.stderr:
            raise PermissionError(rel)
        if result.exit_code == files.EXIT_TOO_BIG:
            raise TooBig(rel, int(result.stderr.strip() or 0), MAX_READ_BYTES)
        _raise_for(result, rel)
        return result.stdout

    async def write_file(self, ref: EnvRef, path: str, data: bytes) -> None:
        rel = files.check_writable(path)
        tmp_name = f"{time.monotonic_ns()}-{secrets.token_hex(3)}"
        await self._untar(self._pod(ref), files.file_tar(tmp_name, data))
        result = await self._sh(
            ref, files.MOVE_INTO_PLACE, files.abs_path(rel), f"{km.WORKSPACE}/{files.TMP_DIR}/{tmp_name}"
        )
        if result.exit_code and files.NO_SPACE in result.stderr.decode(errors="replace").lower():
            raise WorkspaceFull()
        _raise_for(result, rel)

    async def reset_lab(self, ref: EnvRef, lab: LabSeed, backup_name: str) -> str:
        lab_rel, backup = safe_relpath(lab.lab_id), safe_relpath(backup_name)
        if not lab_rel or "/" in lab_rel or not backup:
            raise PathRefused(lab.lab_id)
        result = await self._sh(ref, files.BACKUP_LAB, backup, lab_rel)
        if result.exit_code != 0:
            raise OSError(f"could not back up {lab_rel}: {result.stderr.decode(errors='replace')}")
        await self._untar(self._pod(ref), await asyncio.to_thread(files.seed_tar, lab_rel, lab.starter))
        return f".backups/{backup}/{lab_rel}"

    async def archive(self, ref: EnvRef, path: str) -> bytes:
        rel = safe_relpath(path)
        resolved = await self._resolve(ref, rel)
        parent, _, base = resolved.rstrip("/").rpartition("/")
        result = await self._exec_pod(
            self._pod(ref),
            [
                "sh",
                "-c",
                'tar -c -C "$1" -- "$2" | head -c "$3"',
                "sh",
                parent or "/",
                base,
                str(MAX_ARCHIVE_BYTES + 1),
            ],
            120,
        )
        if len(result.stdout) > MAX_ARCHIVE_BYTES:
            raise TooBig(f"The folder {rel}", len(result.stdout), MAX_ARCHIVE_BYTES)
        return await asyncio.to_thread(files.tar_to_zip, result.stdout, base or "workspace")

    async def aclose(self) -> None:
        """Close the API client and the thread pool."""
        self.api.close()


def _raise_for(result: ExecResult, rel: str) -> None:
    code = result.exit_code
    if code == 0:
        return
    if code == files.EXIT_REFUSED:
        raise PathRefused(rel)
    if code == files.EXIT_MISSING:
        raise FileNotFoundError(rel)
    if code == files.EXIT_ISDIR:
        raise IsADirectoryError(rel)
    raise OSError(f"{rel}: {result.stderr.decode(errors='replace').strip() or f'exit {code}'}")
