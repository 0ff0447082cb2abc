"""Where an environment runs: nodes (Docker engines), their capacity and their Ascend cards.

Pure bookkeeping, no Docker calls: :func:`place` takes the nodes and what already runs on them
(:class:`Usage`, rebuilt from container labels, so a restarted server knows which cards are taken)
and returns a :class:`Placement` or raises :class:`NoRoom`.

Rules
-----
- ``device: cpu`` never gets a card; ``device: npu`` needs a free card, else :class:`NoRoom`
  (``reason="no-card"``); ``device: any`` gets a free card when one exists, else CPU emulation with
  a notice for the attendee ("fallback").
- A card is never given to two environments. An environment keeps its card while its container
  exists (running or stopped); a stopped container promises no CPU or memory (the instructor's
  "Stop all" and idle culling free room for the queue), and starting it again is not refused.
- A node has room when the CPU and memory already promised plus the new environment fit in
  ``cpus x cpu_overcommit`` and ``memory_mb x memory_overcommit``, and its ``max_envs`` is not
  reached. Limits are ceilings, not reservations: a workshop environment is an idle shell most of
  the time (a few MiB, no CPU), so the defaults promise 8x the cores and 1.5x the memory (30
  attendees at 0.5 CPU / 1 GiB on a 2-core, 24 GiB machine). For labs that really use their memory
  (a model loaded in every environment) set ``memory_overcommit: 1`` in the node file. Among nodes with
  room the least loaded (by memory share) wins; NPU labs prefer ``npu`` nodes over ``npu-simulated``.
- Node kinds: ``cpu`` (no cards), ``npu`` (cards with real device files), ``npu-simulated`` (cards
  bookkept exactly like ``npu`` but no device files or driver mounts are passed: for tests and demos
  on machines without Ascend hardware; the environment runs CPU emulation and says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

NodeKind = Literal["cpu", "npu", "npu-simulated"]

#: Driver files an NPU container needs (vllm-ascend quick start; read-only binds).
DEFAULT_NPU_MOUNTS = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
NPU_MANAGER_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")


class NoRoom(Exception):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclass(frozen=True)
class Node:
    name: str
    url: str  # unix:///var/run/docker.sock | tcp://host:2376 | ssh://user@host
    kind: NodeKind = "cpu"
    cpus: float = 2.0
    memory_mb: int = 4096
    cards: tuple[int, ...] = ()
    max_envs: int = 0  # 0 = no limit besides cpu/memory
    cpu_overcommit: float = 8.0  # attendees mostly idle: promise up to cpus x this
    memory_overcommit: float = 1.5  # limits are ceilings: promise up to memory_mb x this
    npu_mounts: tuple[str, ...] = DEFAULT_NPU_MOUNTS
    visible_devices: Literal["logical", "physical"] = "logical"
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_cards(self) -> bool:
        return self.kind in ("npu", "npu-simulated") and bool(self.cards)


@dataclass(frozen=True)
class Placement:
    node: Node
    card: int | None = None  # physical card number on the node
    notice: str = ""  # shown to the attendee (e.g. the CPU fallback)

    @property
    def device(self) -> str:
        """``LAB_DEVICE``: ``npu:0`` (the container sees its one card as logical device 0) or
        ``cpu-emu`` (also for ``npu-simulated`` nodes, which have no hardware)."""
        if self.card is not None and self.node.kind == "npu":
            return "npu:0"
        return "cpu-emu"

    def device_files(self) -> list[str]:
        if self.card is None or self.node.kind != "npu":
            return []
        return [f"/dev/davinci{self.card}", *NPU_MANAGER_DEVICES]

    def driver_mounts(self) -> list[str]:
        return list(self.node.npu_mounts) if self.card is not None and self.node.kind == "npu" else []

    def environment(self) -> dict[str, str]:
        if self.card is None:
            return {}
        env = {"LABSERVER_CARD": str(self.card)}
        if self.node.kind == "npu":
            visible = "0" if self.node.visible_devices == "logical" else str(self.card)
            env["ASCEND_RT_VISIBLE_DEVICES"] = visible
        return env


@dataclass(frozen=True)
class Running:
    """One existing environment, as its container labels tell."""

    env_id: str
    node: str
    cpus: float
    memory_mb: int
    card: int | None = None
    active: bool = True  # False: the container is stopped (holds its card, no CPU or memory)


@dataclass
class Usage:
    envs: list[Running] = field(default_factory=list)

    def on(self, node: str) -> list[Running]:
        return [e for e in self.envs if e.node == node]

    def cards_taken(self, node: str) -> set[int]:
        return {e.card for e in self.on(node) if e.card is not None}


def has_room(node: Node, usage: Usage, cpus: float, memory_mb: int) -> bool:
    here = [e for e in usage.on(node.name) if e.active]  # a stopped container promises nothing
    if node.max_envs and len(here) >= node.max_envs:
        return False
    cpu_used = sum(e.cpus for e in here)
    mem_used = sum(e.memory_mb for e in here)
    return (
        cpu_used + cpus <= node.cpus * node.cpu_overcommit + 1e-9
        and mem_used + memory_mb <= node.memory_mb * node.memory_overcommit + 1e-9
    )


def _load(node: Node, usage: Usage) -> float:
    return sum(e.memory_mb for e in usage.on(node.name) if e.active) / max(node.memory_mb, 1)


FALLBACK_NOTICE = (
    "No Ascend card is free right now, so your environment runs in CPU emulation. Every lab works "
    "there; timings are emulated. Ask the instructor if you need a card."
)
SIMULATED_NOTICE = "This node simulates Ascend cards (no hardware): your environment runs CPU emulation."


def place(nodes: Iterable[Node], usage: Usage, *, device: str, cpus: float, memory_mb: int) -> Placement:
    """Choose a node (and a card) for a new environment. ``device`` is lab.yaml's
    ``requires.device``: ``any`` | ``npu`` | ``cpu``."""
    nodes = list(nodes)
    if not nodes:
        raise NoRoom("No Docker node is configured.", "no-nodes")
    roomy = sorted((n for n in nodes if has_room(n, usage, cpus, memory_mb)), key=lambda n: _load(n, usage))
    if device in ("npu", "any"):
        with_card = [n for n in roomy if n.has_cards]
        with_card.sort(key=lambda n: (n.kind != "npu", _load(n, usage)))
        for node in with_card:
            free = sorted(set(node.cards) - usage.cards_taken(node.name))
            if free:
                notice = SIMULATED_NOTICE if node.kind == "npu-simulated" else ""
                return Placement(node, free[0], notice)
        if device == "npu":
            if any(n.has_cards for n in nodes):
                raise NoRoom(
                    "Every Ascend card is in use and this lab needs one. Ask the instructor.", "no-card"
                )
            raise NoRoom("This lab needs an Ascend card and no node has one.", "no-card")
    # CPU placement: prefer nodes without cards so cards stay free for NPU labs.
    roomy.sort(key=lambda n: (n.has_cards, _load(n, usage)))
    if not roomy:
        raise NoRoom("The lab machines are full right now. Ask the instructor.", "no-room")
    has_any_card = any(n.has_cards for n in nodes)
    notice = FALLBACK_NOTICE if device == "any" and has_any_card else ""
    return Placement(roomy[0], None, notice)


def _node_from_dict(raw: Mapping[str, Any], index: int) -> Node:
    known = {
        "name",
        "url",
        "kind",
        "cpus",
        "memory_mb",
        "cards",
        "max_envs",
        "cpu_overcommit",
        "memory_overcommit",
        "npu_mounts",
        "visible_devices",
        "labels",
    }
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"node #{index + 1}: unknown field(s) {sorted(unknown)}")
    if "url" not in raw:
        raise ValueError(f"node #{index + 1}: 'url' is required")
    url = str(raw["url"])
    if not url.startswith(("unix://", "tcp://", "ssh://")):
        raise ValueError(f"node #{index + 1}: url must start with unix://, tcp:// or ssh://")
    kind = raw.get("kind", "cpu")
    if kind not in ("cpu", "npu", "npu-simulated"):
        raise ValueError(f"node #{index + 1}: kind must be cpu, npu or npu-simulated")
    cards = raw.get("cards", [])
    if isinstance(cards, int):
        cards = list(range(cards))
    if kind == "cpu" and cards:
        raise ValueError(f"node #{index + 1}: a cpu node has no cards")
    return Node(
        name=str(raw.get("name", f"node{index + 1}")),
        url=url,
        kind=kind,
        cpus=float(raw.get("cpus", 2)),
        memory_mb=int(raw.get("memory_mb", 4096)),
        cards=tuple(int(c) for c in cards),
        max_envs=int(raw.get("max_envs", 0)),
        cpu_overcommit=float(raw.get("cpu_overcommit", 8.0)),
        memory_overcommit=float(raw.get("memory_overcommit", 1.5)),
        npu_mounts=tuple(raw.get("npu_mounts", DEFAULT_NPU_MOUNTS)),
        visible_devices=raw.get("visible_devices", "logical"),
        labels=dict(raw.get("labels", {})),
    )


def load_nodes(path: Path) -> list[Node]:
    """Read a nodes file (``provisioning/nodes.example.yaml`` documents the fields)."""
    raw = yaml.safe_load(path.read_text()) or {}
    items = raw.get("nodes", []) if isinstance(raw, dict) else []
    nodes = [_node_from_dict(item, i) for i, item in enumerate(items)]
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: node names must be unique")
    return nodes
