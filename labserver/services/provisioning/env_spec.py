"""Which image and which limits an attendee's environment gets: pure rules, no I/O.

Image (``EnvSpec.image``), most specific first
----------------------------------------------
1. the **event's** ``image`` (the instructor chose it for this room, e.g. one NPU image for the
   day's labs; it must carry every lab of the event);
2. the **labs'** ``image:`` in lab.yaml, in the event's lab order: the first lab that names one
   (a container has one image; labs naming different ones are reported by :func:`image_conflicts`
   and logged). A lab naming the *repository* of the server's default without a tag
   (``labserver/cpu-emu`` while the server runs ``labserver/cpu-emu:<hash>``) gets the server's
   tag: the lab says which software it needs, the operator pins which build;
3. the server's ``LABSERVER_DOCKER__IMAGE``.

Limits (``EnvSpec.cpus`` / ``memory_mb``)
-----------------------------------------
- ``LABSERVER_DOCKER__CPUS`` / ``MEMORY_MB`` **set**: every attendee container gets exactly that.
  The operator owns the machine and sizes the room (0.5 CPU / 1 GiB for 30 on one host); a lab's
  ``requires`` is its author's estimate for a machine they did not see. A lab asking more than the
  setting is logged (:func:`limits_for` returns the shortfall) so the operator sees it.
- **unset** (the default): the largest ``requires`` of the event's labs (1 CPU / 2048 MiB when the
  event has no lab).
Placement admits against the same numbers, so what is promised is what the container gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labserver.config import DockerSettings
from labserver.content import Lab

DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MB = 2048


def _named_image(lab: Lab) -> str:
    """The image a lab's lab.yaml names ('' when it names none)."""
    return lab.spec.image.strip() if "image" in lab.spec.model_fields_set else ""


def _repo(image: str) -> str:
    """``registry:5000/a/b:tag`` -> ``registry:5000/a/b`` (digests and tags stripped)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _has_tag(image: str) -> bool:
    return "@" in image or _repo(image) != image


def image_for(event_image: str, labs: Sequence[Lab], default: str) -> str:
    """The image of the event's environments (rules in the module docstring)."""
    if event_image.strip():
        return event_image.strip()
    for lab in labs:
        named = _named_image(lab)
        if named:
            if not _has_tag(named) and _repo(default) == named:
                return default
            return named
    return default


def image_conflicts(labs: Sequence[Lab]) -> list[str]:
    """Labs (``id: image``) whose image differs from the first lab's that names one: they would
    run in the first one's image unless the event names an image carrying them all."""
    named = [(lab.id, _named_image(lab)) for lab in labs if _named_image(lab)]
    if not named:
        return []
    first = named[0][1]
    return [f"{lab_id}: {image}" for lab_id, image in named[1:] if image != first]


@dataclass(frozen=True)
class Limits:
    cpus: float
    memory_mb: int
    #: labs asking more than the server's setting gives (``lab id: what it asks``), for the log
    short: tuple[str, ...] = ()


def limits_for(labs: Sequence[Lab], settings: DockerSettings) -> Limits:
    """The CPU and memory limit of the event's environments (rules in the module docstring)."""
    want_cpus = max([lab.spec.requires.cpus for lab in labs] or [DEFAULT_CPUS])
    want_mem = max([lab.spec.requires.memory_mb for lab in labs] or [DEFAULT_MEMORY_MB])
    cpus = settings.cpus if settings.cpus is not None else want_cpus
    memory = settings.memory_mb if settings.memory_mb is not None else want_mem
    short = tuple(
        f"{lab.id}: {lab.spec.requires.cpus:g} CPU, {lab.spec.requires.memory_mb} MiB"
        for lab in labs
        if lab.spec.requires.cpus > cpus + 1e-9 or lab.spec.requires.memory_mb > memory
    )
    return Limits(cpus, memory, short)
