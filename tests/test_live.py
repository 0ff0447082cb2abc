"""The live hub's promises under a room's load: an attendee's event reaches that attendee's streams
and the event's instructors only (subscriptions indexed, not scanned); an instructor stream takes
only the kinds it shows, so hundreds of queue positions a second cannot push it into a resync;
``once`` computes a render one time for every stream that asks, off the loop."""

from __future__ import annotations

import asyncio
import threading

from labserver.live import Kind, LiveHub
from labserver.routes.instructor.stream import GRID_KINDS


def _drain(sub) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    while not sub.queue.empty():
        out.append(str(sub.queue.get_nowait().kind))
    return out


def test_an_attendee_event_reaches_that_attendee_and_the_instructors_only() -> None:
    hub = LiveHub()
    ada, bob = hub.subscribe(1, 10), hub.subscribe(1, 11)
    teacher, elsewhere = hub.subscribe(1), hub.subscribe(2)
    hub.publish(Kind.check_started, 1, 10, run_id=1, lab="l", step="s")
    assert (_drain(ada), _drain(bob), _drain(teacher), _drain(elsewhere)) == (
        ["check.started"],
        [],
        ["check.started"],
        [],
    )
    hub.publish(Kind.announcement, 1, None, id=1, message="m", author="z", created_at="t")
    assert [len(_drain(s)) for s in (ada, bob, teacher, elsewhere)] == [1, 1, 1, 0]
    ada.close()
    hub.publish(Kind.check_started, 1, 10, run_id=2, lab="l", step="s")
    assert _drain(ada) == [] and _drain(teacher) == ["check.started"] and hub.subscribers == 3


def test_a_room_of_queue_positions_does_not_push_an_instructor_stream_into_a_resync() -> None:
    hub = LiveHub(maxsize=1000)
    teacher = hub.subscribe(1, kinds=GRID_KINDS)  # as routes/instructor_api.stream subscribes
    for n in range(3000):  # 300 waiting checks told their place ten times over
        hub.publish(Kind.check_queued, 1, n % 300, run_id=n, lab="l", step="s", position=n % 300 + 1)
        hub.publish(Kind.env_queue, 1, n % 300, env_id="e", phase="queued", ahead=1, message="")
    hub.publish(Kind.check_finished, 1, 7, run_id=9, lab="l", step="s", status="passed", message="", name="A")
    assert _drain(teacher) == ["check.finished"] and not teacher.overflowed
    assert Kind.check_queued not in GRID_KINDS and {Kind.check_finished, Kind.help_raised} <= GRID_KINDS


def test_once_runs_one_worker_thread_job_for_every_stream_and_survives_a_stream_leaving() -> None:
    hub = LiveHub()
    ev = hub.publish(Kind.step_opened, 1, 7, lab="l", step="s")
    threads: list[int] = []
    gate = threading.Event()

    def read() -> str:
        gate.wait(10)
        threads.append(threading.get_ident())
        return "cell"

    async def scenario() -> list[str]:
        loop_thread = threading.get_ident()
        leaver = asyncio.ensure_future(hub.once(ev, read))
        stayers = [asyncio.ensure_future(hub.once(ev, read)) for _ in range(4)]
        await asyncio.sleep(0.01)
        leaver.cancel()  # a dashboard closed while its delta was being read
        gate.set()
        out = await asyncio.gather(*stayers)
        assert loop_thread not in threads
        return out

    assert asyncio.run(scenario()) == ["cell"] * 4
    assert len(threads) == 1 and hub.computed == 1
