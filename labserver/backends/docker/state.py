"""What the Docker backend keeps in ``EnvRef.data``, typed.

``EnvRef.data`` is JSON stored on the environment row (so a restarted server hands the reference
back) and rebuilt from container labels by ``discover``; :class:`DockerState` is its one reader and
writer. Keys stay as they were stored before this class existed, so old rows still load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from labserver.backends.base import EnvRef
from labserver.backends.docker import config as dc


@dataclass(frozen=True)
class DockerState:
    container: str  # the container's name (deterministic: <prefix>-<escaped env id>)
    volume: str  # the workspace volume's name
    image: str = ""  # the image the container was made from ("" = the configured default)
    card: int | None = None  # the physical Ascend card it holds, if any
    notice: str = ""  # shown to the attendee with the status (CPU fallback, simulated card)
    cpus: float = 1.0
    memory_mb: int = 2048

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str], *, container: str, volume: str) -> DockerState:
        """The state a container's labels tell (``discover`` after a restart)."""
        card = labels.get("labserver.card")
        return cls(
            container=container,
            volume=volume,
            image=labels.get("labserver.image", ""),
            card=int(card) if card is not None else None,
            notice=labels.get("labserver.notice", ""),
            cpus=float(labels.get("labserver.cpus", 1)),
            memory_mb=int(labels.get("labserver.memory_mb", 0)),
        )

    @classmethod
    def of(cls, ref: EnvRef, prefix: str = dc.DEFAULT_PREFIX) -> DockerState:
        """The state stored in ``ref.data``; names fall back to the deterministic ones and limits
        to the defaults when a key is missing or empty."""
        data = ref.data
        card = data.get("card")
        return cls(
            container=str(data.get("container") or dc.container_name(ref.env_id, prefix)),
            volume=str(data.get("volume") or dc.volume_name(ref.env_id, prefix)),
            image=str(data.get("image") or ""),
            card=int(card) if card is not None else None,
            notice=str(data.get("notice") or ""),
            cpus=float(data.get("cpus") or 1.0),
            memory_mb=int(data.get("memory_mb") or 2048),
        )
