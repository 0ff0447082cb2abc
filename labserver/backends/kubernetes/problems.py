"""What went wrong with a pod, and what the attendee is told, in English and Chinese (pure).

:func:`diagnose` reads a pod (the API's JSON) and answers a :class:`Problem` or None; the table
:data:`MESSAGES` holds, per ``reason``, the sentence for people in both languages (the server stores
an environment's message as one string, so it carries both, English first). :func:`progress_of`
turns the pod's events (Scheduled, Pulling, Pulled, Created, Started) into the attendee's progress
phases.

| reason | seen as | the attendee is told |
|---|---|---|
| ``no-card`` | PodScheduled=False, Unschedulable, "Insufficient <card resource>" | no card free; CPU emulation when the lab allows it (the backend falls back by itself) |
| ``no-room`` | PodScheduled=False, Unschedulable, anything else | the cluster is full, try again |
| ``image-pull`` | waiting: ErrImagePull, ImagePullBackOff, InvalidImageName, ErrImageNeverPull | the lab image cannot be pulled; the instructor must fix it |
| ``evicted`` | phase Failed with reason Evicted / NodeLost / a DisruptionTarget condition, or the node is gone | the machine was lost; the workspace is kept, the instructor can recreate |
| ``crash`` | waiting: CrashLoopBackOff | the environment keeps crashing |
| ``quota`` | the API answered 403 "exceeded quota" | the namespace's quota is used up |
| ``api-down`` | the API server did not answer (after the backoff helper's retries) | the cluster does not answer, try again in a minute |
| ``cut`` | the exec's connection broke after it opened (the command may have run: never retried) | the environment stopped answering; look before running it again |
| ``not-running`` | the exec handshake answered 4xx (no host assigned, the container not running) | the environment is not running; start it again |
| ``exec-refused`` | the exec handshake answered 401/403 (the server's role lacks ``pods/exec``) | the cluster refused; the instructor must fix the server's rights |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: reason -> (English, Chinese)
MESSAGES: dict[str, tuple[str, str]] = {
    "no-card": (
        "No Ascend card is free in the cluster right now. Try again in a few minutes, or ask the instructor.",
        "集群中暂时没有空闲的昇腾卡。请几分钟后重试，或联系讲师。",
    ),
    "cpu-fallback": (
        "No Ascend card was free, so your environment runs on CPU emulation; this lab works there too.",
        "暂时没有空闲的昇腾卡，您的环境改用 CPU 仿真运行；本实验在仿真下同样可以完成。",
    ),
    "no-room": (
        "The cluster has no room for your environment right now. Try again in a minute.",
        "集群暂时没有足够资源创建您的环境。请一分钟后重试。",
    ),
    "image-pull": (
        "The lab image cannot be pulled onto the lab machine. The instructor must fix the image name or registry.",
        "实验镜像无法拉取到实验机器上。请讲师检查镜像名称或镜像仓库。",
    ),
    "evicted": (
        "The machine your environment ran on was lost. Your files are kept: the instructor can recreate it on another machine.",
        "您的环境所在的机器已失联。您的文件已保留：讲师可以在另一台机器上重新创建环境。",
    ),
    "crash": (
        "Your environment keeps crashing while it starts. The instructor can see why.",
        "您的环境在启动时反复崩溃。讲师可以查看原因。",
    ),
    "quota": (
        "The event's share of the cluster (its quota) is used up. Ask the instructor to free or raise it.",
        "本活动在集群中的配额已用完。请联系讲师释放或提高配额。",
    ),
    "api-down": (
        "The cluster does not answer right now. Try again in a minute.",
        "集群暂时没有响应。请一分钟后重试。",
    ),
    "cut": (
        "Your environment stopped answering while the command ran (it may have run). Check its result before running it again.",
        "命令运行期间您的环境停止了响应（命令可能已经执行）。请先确认结果，再决定是否重新运行。",
    ),
    "not-running": (
        "Your environment is not running right now. Start it again (your files are kept), or ask the instructor.",
        "您的环境当前没有运行。请重新启动（您的文件已保留），或联系讲师。",
    ),
    "exec-refused": (
        "The cluster refused to open your environment's shell. The instructor must check the server's rights.",
        "集群拒绝打开您环境的终端。请讲师检查服务器的权限。",
    ),
    "timeout": (
        "Your environment did not become ready in time. Try again, or ask the instructor.",
        "您的环境未能按时就绪。请重试，或联系讲师。",
    ),
}


def message(reason: str) -> str:
    """The people's sentence for ``reason``: English, then Chinese on its own line."""
    en, zh = MESSAGES[reason]
    return f"{en}\n{zh}"


@dataclass(frozen=True)
class Problem:
    reason: str  # a key of MESSAGES
    detail: str = ""  # what Kubernetes said, for the operator's log

    @property
    def message(self) -> str:
        return message(self.reason)


IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
LOST = {"Evicted", "NodeLost", "NodeShutdown", "Terminated", "UnexpectedAdmissionError"}


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or []}


def diagnose(pod: Mapping[str, Any], card_resource: str = "") -> Problem | None:
    """The problem of ``pod`` (the API's JSON of a Pod), or None when it is starting or running
    normally. Rules in the module docstring's table, first match wins in its order."""
    status = pod.get("status") or {}
    conds = _conditions(pod)
    disruption = conds.get("DisruptionTarget")
    if status.get("phase") == "Failed" or status.get("reason") in LOST:
        why = status.get("reason") or (disruption or {}).get("reason") or "Failed"
        return Problem("evicted", f"{why}: {status.get('message', '')}".strip())
    if disruption and disruption.get("status") == "True":
        return Problem("evicted", f"{disruption.get('reason')}: {disruption.get('message', '')}")
    scheduled = conds.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        text = str(scheduled.get("message", ""))
        if card_resource and f"Insufficient {card_resource}" in text:
            return Problem("no-card", text)
        return Problem("no-room", text)
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in IMAGE_PULL:
            return Problem("image-pull", f"{reason}: {waiting.get('message', '')}")
        if reason == "CrashLoopBackOff":
            return Problem("crash", f"{reason}: {waiting.get('message', '')}")
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    ready = _conditions(pod).get("Ready") or {}
    return (pod.get("status") or {}).get("phase") == "Running" and ready.get("status") == "True"


#: event reason -> (progress phase, message)
EVENT_PHASES: dict[str, tuple[str, str]] = {
    "Scheduled": ("placing", "Placed on a lab machine"),
    "Pulling": ("pulling", "Pulling the lab image"),
    "Pulled": ("creating", "Lab image ready"),
    "Created": ("creating", "Container created"),
    "Started": ("starting", "Starting"),
}


def progress_of(events: Iterable[Mapping[str, Any]], seen: set[str]) -> list[tuple[str, str]]:
    """The progress phases of the pod's ``events`` not yet in ``seen`` (event uids; updated), in
    the order the events happened."""
    out = []
    for ev in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")):
        uid = str((ev.get("metadata") or {}).get("uid") or id(ev))
        phase = EVENT_PHASES.get(str(ev.get("reason", "")))
        if phase is None or uid in seen:
            continue
        seen.add(uid)
        out.append(phase)
    return out
