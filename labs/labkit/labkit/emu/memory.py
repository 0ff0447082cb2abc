"""Emulated device memory: a capacity, allocations grouped by tag, peak tracking.

Memory is accounted, not allocated: tensors stay where torch put them (host RAM on a CPU,
the card on an NPU). What the accounting enforces is the budget: an allocation that would
exceed the capacity raises :class:`OutOfDeviceMemory` naming the biggest holders, so a lab
can check "the model never went over the device budget" deterministically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def fmt_bytes(n: float) -> str:
    """Human-readable binary size: ``fmt_bytes(3 * 2**20) == '3.00 MiB'``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


class OutOfDeviceMemory(MemoryError):
    """An allocation would exceed the emulated device capacity.

    Attributes: ``tag`` and ``requested`` (bytes) of the failed allocation, ``used``,
    ``capacity`` and ``holders`` (the biggest tags as ``(tag, bytes)``, largest first).
    """

    def __init__(self, tag: str, requested: int, used: int, capacity: int, holders: list[tuple[str, int]]):
        self.tag = tag
        self.requested = requested
        self.used = used
        self.capacity = capacity
        self.holders = holders
        top = ", ".join(f"{t!r} {fmt_bytes(b)}" for t, b in holders) or "nothing"
        super().__init__(
            f"emulated device out of memory: asked {fmt_bytes(requested)} for {tag!r} with "
            f"{fmt_bytes(used)} of {fmt_bytes(capacity)} in use ({fmt_bytes(capacity - used)} free); "
            f"biggest holders: {top}"
        )


def tensor_nbytes(tensor: Any) -> int:
    """Bytes of a tensor (or of a list/tuple/dict of tensors)."""
    if isinstance(tensor, dict):
        return sum(tensor_nbytes(t) for t in tensor.values())
    if isinstance(tensor, list | tuple):
        return sum(tensor_nbytes(t) for t in tensor)
    return int(tensor.numel() * tensor.element_size())


class DeviceMemory:
    """Capacity plus per-tag byte counts.

    ``alloc(tag, n)`` adds ``n`` bytes under ``tag`` (several allocations may share a tag);
    ``free(tag)`` releases all of a tag, ``free(tag, n)`` part of it. ``peak`` is the
    high-water mark of ``used``; ``peak_by_tag()`` is the breakdown at that moment.
    ``to_device``/``to_host`` also charge the host<->device transfer on the session's
    current stream (through ``transfer``, set by the session).
    """

    def __init__(
        self,
        capacity: int,
        transfer: Callable[[str, int, str], None] | None = None,
        place: Callable[[torch.Tensor, bool], torch.Tensor] | None = None,
    ):
        self.capacity = int(capacity)
        self._by_tag: dict[str, int] = {}
        self._used = 0
        self._peak = 0
        self._peak_by_tag: dict[str, int] = {}
        self._transfer = transfer
        self._place = place

    @property
    def used(self) -> int:
        return self._used

    @property
    def free_bytes(self) -> int:
        return self.capacity - self._used

    @property
    def peak(self) -> int:
        return self._peak

    def used_by_tag(self) -> dict[str, int]:
        """Current bytes per tag, largest first."""
        return dict(sorted(self._by_tag.items(), key=lambda kv: (-kv[1], kv[0])))

    def peak_by_tag(self) -> dict[str, int]:
        """Bytes per tag at the moment of the peak, largest first."""
        return dict(sorted(self._peak_by_tag.items(), key=lambda kv: (-kv[1], kv[0])))

    def holders(self, n: int = 5) -> list[tuple[str, int]]:
        return list(self.used_by_tag().items())[:n]

    def alloc(self, tag: str, nbytes: int) -> None:
        """Account ``nbytes`` under ``tag``; raise :class:`OutOfDeviceMemory` if over capacity."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"alloc of a negative size ({nbytes}) for {tag!r}")
        if self._used + nbytes > self.capacity:
            raise OutOfDeviceMemory(tag, nbytes, self._used, self.capacity, self.holders())
        self._by_tag[tag] = self._by_tag.get(tag, 0) + nbytes
        self._used += nbytes
        if self._used > self._peak:
            self._peak = self._used
            self._peak_by_tag = dict(self._by_tag)

    def free(self, tag: str, nbytes: int | None = None) -> int:
        """Release all of ``tag`` (or ``nbytes`` of it); returns the bytes released.

        Freeing a tag that holds nothing is allowed and returns 0 (like deleting something
        already gone); freeing more than a tag holds is an error.
        """
        held = self._by_tag.get(tag, 0)
        n = held if nbytes is None else int(nbytes)
        if n > held:
            raise ValueError(f"free of {fmt_bytes(n)} from {tag!r}, which holds {fmt_bytes(held)}")
        if held - n == 0:
            self._by_tag.pop(tag, None)
        else:
            self._by_tag[tag] = held - n
        self._used -= n
        return n

    def holds(self, tag: str) -> int:
        return self._by_tag.get(tag, 0)

    def to_device(self, tensor: torch.Tensor, tag: str) -> torch.Tensor:
        """Account a host->device copy of ``tensor`` under ``tag`` (alloc + H2D bytes).

        Returns the tensor on the device: the same tensor in emulation, a copy on the NPU.
        """
        n = tensor_nbytes(tensor)
        self.alloc(tag, n)
        if self._transfer is not None:
            self._transfer("h2d", n, tag)
        return self._place(tensor, True) if self._place is not None else tensor

    def to_host(self, tensor: torch.Tensor, tag: str | None = None) -> torch.Tensor:
        """Account a device->host copy of ``tensor`` (D2H bytes); with ``tag``, also free its bytes
        from that tag (the device copy is dropped, as when offloading)."""
        n = tensor_nbytes(tensor)
        if tag is not None:
            self.free(tag, min(n, self.holds(tag)))
        if self._transfer is not None:
            self._transfer("d2h", n, tag or "to_host")
        return self._place(tensor, False) if self._place is not None else tensor

    def summary(self) -> dict[str, Any]:
        return {
            "capacity_bytes": self.capacity,
            "used_bytes": self._used,
            "peak_bytes": self._peak,
            "used_by_tag": self.used_by_tag(),
            "peak_by_tag": self.peak_by_tag(),
        }
