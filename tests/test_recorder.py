"""The recorder on a real folder: valid asciicast v2 (a UTF-8 sequence split across reads comes out
whole), markers, nothing written on the terminal's path (batches only), the size cap per attendee
(thirty shells of one attendee at once never take more), deletion, and ids that are never paths."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from labserver.terminals.recorder import CAP_MARK, MAX_PENDING, SKIP_MARK, RecordingStore


def events(path: Path) -> tuple[dict, list[list]]:
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def test_output_markers_and_resizes_make_a_valid_asciicast(tmp_path: Path) -> None:
    async def scenario() -> Path:
        store = RecordingStore(tmp_path, max_bytes=1 << 20, flush_s=0.01)
        rec = await store.start("ev1-at1", "getting-started", 100, 30, title="Ada: getting-started")
        assert rec is not None
        word = "仿真 ok\r\n".encode()
        rec.output(word[:2])  # the first character's bytes split across two reads
        rec.output(word[2:])
        rec.mark("Check find-device")
        rec.resize(120, 40)
        rec.input(b"secret\r")  # not recorded: the event did not ask for input
        await rec.close()
        return rec.path

    head, evs = events(asyncio.run(scenario()))
    assert head["version"] == 2 and (head["width"], head["height"]) == (100, 30)
    assert head["title"] == "Ada: getting-started"
    assert [e[1:] for e in evs] == [["o", "仿真 ok\r\n"], ["m", "Check find-device"], ["r", "120x40"]]
    assert all(e[0] >= 0 for e in evs)


def test_input_is_recorded_only_when_asked(tmp_path: Path) -> None:
    async def scenario() -> Path:
        store = RecordingStore(tmp_path, max_bytes=1 << 20)
        rec = await store.start("ev1-at1", "getting-started", 80, 24, record_input=True)
        assert rec is not None
        rec.input(b"ls\r")
        await rec.close()
        return rec.path

    _, evs = events(asyncio.run(scenario()))
    assert [e[1:] for e in evs] == [["i", "ls\r"]]


def test_the_terminal_path_writes_nothing_itself(tmp_path: Path) -> None:
    """``output`` only queues: the file holds the header until the batch is written off the loop."""

    async def scenario() -> tuple[int, int, int]:
        store = RecordingStore(tmp_path, max_bytes=1 << 20, flush_s=30)
        rec = await store.start("ev1-at1", "getting-started", 80, 24)
        assert rec is not None
        header = rec.path.stat().st_size
        for _ in range(100):
            rec.output(b"x" * 100)
        queued = rec.path.stat().st_size
        await rec.close()
        return header, queued, rec.path.stat().st_size

    header, queued, final = asyncio.run(scenario())
    assert queued == header < final


def test_thirty_shells_of_one_attendee_never_pass_the_cap(tmp_path: Path) -> None:
    cap = 20_000

    async def scenario() -> list[Path]:
        store = RecordingStore(tmp_path, max_bytes=cap, flush_s=0.01)
        recs = [
            r for r in await asyncio.gather(*(store.start("ev1-at7", "lab", 80, 24) for _ in range(30))) if r
        ]

        async def shell(rec) -> None:  # type: ignore[no-untyped-def]
            for i in range(200):
                rec.output(f"line {i} of output\r\n".encode())
                await asyncio.sleep(0)
            await rec.close()

        await asyncio.gather(*(shell(r) for r in recs))
        # a later shell of the same attendee records nothing more than its header allows
        later = await store.start("ev1-at7", "lab", 80, 24)
        if later is not None:
            later.output(b"y" * 5000)
            await later.close()
        return sorted((tmp_path / "ev1-at7").iterdir())

    files = asyncio.run(scenario())
    assert sum(p.stat().st_size for p in files) <= cap
    stopped = [p for p in files if events(p)[1] and events(p)[1][-1][1:] == ["m", CAP_MARK]]
    assert stopped, "a recording that reached the cap says so"


def test_cap_is_read_back_from_disk_after_a_restart(tmp_path: Path) -> None:
    async def scenario() -> int:
        first = RecordingStore(tmp_path, max_bytes=3000)
        rec = await first.start("ev1-at1", "lab", 80, 24)
        assert rec is not None
        rec.output(b"z" * 2000)
        await rec.close()
        again = RecordingStore(tmp_path, max_bytes=3000)  # a restarted server
        rec = await again.start("ev1-at1", "lab", 80, 24)
        assert rec is not None
        rec.output(b"z" * 2000)
        await rec.close()
        return sum(p.stat().st_size for p in (tmp_path / "ev1-at1").iterdir())

    assert asyncio.run(scenario()) <= 3000


def test_list_find_and_delete(tmp_path: Path) -> None:
    async def scenario() -> RecordingStore:
        store = RecordingStore(tmp_path, max_bytes=1 << 20)
        for lab in ("getting-started", "kv-offload"):
            rec = await store.start("ev1-at1", lab, 80, 24)
            assert rec is not None
            await rec.close()
        return store

    store = asyncio.run(scenario())
    rows = store.list("ev1-at1")
    assert sorted(r.lab for r in rows) == ["getting-started", "kv-offload"]
    assert store.find("ev1-at1", rows[0].id) == rows[0]
    (tmp_path / "secret.cast").write_text("not a recording of anyone")
    for hostile in ("../secret", "..", "", rows[0].id + ".cast", "/etc/passwd"):
        assert store.find("ev1-at1", hostile) is None
    assert store.find("ev1-at2", rows[0].id) is None  # another attendee's folder has no such file
    asyncio.run(store.delete_env("ev1-at1"))
    assert store.list("ev1-at1") == [] and not (tmp_path / "ev1-at1").exists()
    asyncio.run(store.delete_env("ev1-at1"))  # deleting what is gone is success


def test_a_writer_far_behind_drops_output_and_says_so(tmp_path: Path) -> None:
    """Memory stays bounded when output outruns the writer: past MAX_PENDING queued bytes output is
    dropped (counted), and the recording marks where."""

    async def scenario() -> tuple[int, list[list]]:
        store = RecordingStore(tmp_path, max_bytes=1 << 30, flush_s=30)
        rec = await store.start("ev1-at1", "lab", 80, 24)
        assert rec is not None
        chunk = b"x" * 4096
        for _ in range(MAX_PENDING // 4096 + 100):  # no await: the writer never gets a turn
            rec.output(chunk)
        await rec.close()
        return rec.dropped, events(rec.path)[1]

    dropped, evs = asyncio.run(scenario())
    assert dropped > 0
    assert ["m", SKIP_MARK] in [e[1:] for e in evs]
