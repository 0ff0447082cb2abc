"""Disk on the local backend (issue 13 item 10): there is no per-workspace limit (docs/security.md,
Disk), but no attendee process can make one file bigger than ``limits.FSIZE`` (RLIMIT_FSIZE). The
attack runs from the terminal; the file is sparse, so the test costs no disk."""

from __future__ import annotations

from labserver.backends import limits
from tests.backends.test_local_attacks import attack, shell, two_attendees  # noqa: F401


def test_one_file_cannot_grow_past_the_file_size_limit(attack) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    import asyncio

    backend, settings = attack
    mine, _ = asyncio.run(two_attendees(backend, settings))
    over = limits.FSIZE + 1024**3
    big, small = shell(
        backend,
        mine,
        f"truncate -s {over} big.bin; echo big-rc=$?; stat -c size=%s big.bin",
        f"truncate -s {limits.FSIZE // 2} ok.bin; echo small-rc=$?; stat -c size=%s ok.bin",
    )
    assert "big-rc=0" not in big and f"size={over}" not in big, big
    assert "small-rc=0" in small and f"size={limits.FSIZE // 2}" in small, small
