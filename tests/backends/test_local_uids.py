"""The local backend's uids: each environment gets its own, a destroyed one's is given back, and a new
environment reads no other environment's record (a room of 300 joining read 45,000 records, each
join under the lock every file operation and check takes: the load rehearsal, issue 30)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labserver.backends.base import EnvSpec, LabSeed
from labserver.backends.local import EnvRecord, LocalBackend
from labserver.config import Settings
from tests.conftest import REPO

LAB = "getting-started"


class CountingBackend(LocalBackend):
    """The real local backend, counting the environment records it reads."""

    reads = 0

    def _read_state(self, name: str) -> EnvRecord | None:
        self.reads += 1
        return super()._read_state(name)


def spec(settings: Settings, n: int) -> EnvSpec:
    seed = LabSeed(LAB, settings.labs_dir / LAB / "starter")
    return EnvSpec(env_id=f"ev1-at{n}", event_id=1, attendee_id=n, labs=(seed,), memory_mb=512, pids=256)


@pytest.mark.usefixtures("as_root")  # uids are switched only by a root server (CI runs as root)
def test_new_environments_read_no_other_record_and_a_destroyed_uid_is_given_back(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", labs_dir=REPO / "labs")
    backend = CountingBackend(settings)
    assert backend.switch

    async def scenario() -> tuple[list[int], list[int], int]:
        refs, reads = [], []
        for n in range(1, 9):
            before = backend.reads
            refs.append(await backend.create(spec(settings, n)))
            reads.append(backend.reads - before)
        uids = [backend._state(Path(r.infra_id)).uid for r in refs]
        await backend.destroy(refs[2])
        again = await backend.create(spec(settings, 9))
        return reads, uids, backend._state(Path(again.infra_id)).uid

    reads, uids, reused = asyncio.run(scenario())
    assert len(set(uids)) == len(uids)
    # the first new environment reads the records there are (none); later ones read only their own
    assert reads[1:] == [reads[1]] * (len(reads) - 1)
    assert reused == uids[2]  # the lowest free uid: the destroyed environment's
    # a restarted server reads the records once, then keeps them
    restarted = CountingBackend(settings)
    with restarted._uid_lock:
        uid = restarted._allocate_uid()
    assert uid not in uids and restarted.reads == len(uids)
