"""Environment backends behind one Protocol (``base.Backend``). ``make_backend(settings)`` picks
the one the settings name."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labserver.backends.base import Backend
    from labserver.config import Settings


def make_backend(settings: Settings, name: str | None = None) -> Backend:
    name = name or settings.backend
    if name == "local":
        from labserver.backends.local import LocalBackend

        return LocalBackend(settings)
    if name == "docker":
        from labserver.backends.docker.backend import DockerBackend

        return DockerBackend(settings)
    if name == "kubernetes":
        from labserver.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(settings)
    raise ValueError(f"unknown backend {name!r}; set LABSERVER_BACKEND to local, docker or kubernetes")
