"""TerminalSession holds input that comes before the shell's first prompt, then writes it in order.
The PTY here is a scripted stand-in for a backend's terminal: it decides when output arrives, so
the prompt mark can be split across two reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from labserver.backends.base import PROMPT_END
from labserver.terminals.sessions import RESYNC, SCROLLBACK, VIEWER_MAX, TerminalSession


class ScriptedPty:
    """Output is what the test feeds; input is recorded."""

    def __init__(self, *, marks_prompt: bool) -> None:
        self.marks_prompt = marks_prompt
        self.output: asyncio.Queue[bytes] = asyncio.Queue()
        self.written: list[bytes] = []

    async def read(self) -> bytes:
        return await self.output.get()

    async def write(self, data: bytes) -> None:
        self.written.append(data)

    async def resize(self, cols: int, rows: int) -> None:
        pass

    async def close(self) -> None:
        self.output.put_nowait(b"")


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0)  # one turn of the loop: the session's pump runs

    await asyncio.wait_for(poll(), 5)


def test_input_before_the_first_prompt_is_written_after_it_in_order() -> None:
    async def go() -> None:
        pty = ScriptedPty(marks_prompt=True)
        session = TerminalSession(("env", "lab"), pty, lambda key: None)
        await session.write(b"echo one\r")
        await session.write(b"echo two\r")
        pty.output.put_nowait(b"lab$ " + PROMPT_END[:3])  # the mark arrives in two pieces
        await until(lambda: session.scrollback.endswith(PROMPT_END[:3]))
        assert pty.written == [] and not session.ready.is_set()
        pty.output.put_nowait(PROMPT_END[3:])
        await session.write(b"echo three\r")  # before or after the pump saw the mark: in order
        await until(lambda: b"".join(pty.written) == b"echo one\recho two\recho three\r")
        assert session.ready.is_set()
        await session.close()

    asyncio.run(go())


def test_a_terminal_that_marks_no_prompt_gets_input_at_once() -> None:
    async def go() -> None:
        pty = ScriptedPty(marks_prompt=False)
        session = TerminalSession(("env", "lab"), pty, lambda key: None)
        assert session.ready.is_set()
        await session.write(b"ls\r")
        assert pty.written == [b"ls\r"]
        await session.close()

    asyncio.run(go())


def test_a_viewer_that_never_reads_holds_a_bounded_backlog_and_is_resynced() -> None:
    """The shell's output never waits for a viewer: 20 MB to one that reads nothing leaves at most
    VIEWER_MAX queued; when it reads again it gets RESYNC (the bridge replays the scrollback), then
    only what came after."""

    async def go() -> None:
        pty = ScriptedPty(marks_prompt=False)
        session = TerminalSession(("env", "lab"), pty, lambda key: None)
        stalled, _ = session.attach()
        chunk = b"a" * 65536
        for _ in range(320):
            pty.output.put_nowait(chunk)
        await until(lambda: len(session.scrollback) == SCROLLBACK and pty.output.empty())
        await asyncio.sleep(0)
        assert stalled.pending <= VIEWER_MAX and stalled.dropped >= 320 * 65536 - VIEWER_MAX
        assert await stalled.get() is RESYNC
        pty.output.put_nowait(b"after")
        assert await asyncio.wait_for(stalled.get(), 5) == b"after"
        await session.close()


def test_thirty_shells_open_in_parallel_and_one_key_opens_once() -> None:
    """Each opener waits until all thirty have begun: a hub that opens one shell at a time (one
    lock around the open) never gets there and the wait_for below gives up."""
    from labserver.terminals.sessions import TerminalHub

    async def go() -> None:
        hub = TerminalHub()
        begun: list[str] = []
        all_begun = asyncio.Event()

        def opener(env: str) -> Callable[[], asyncio.Future[ScriptedPty]]:
            async def open_() -> ScriptedPty:
                begun.append(env)
                if len(begun) == 30:
                    all_begun.set()
                await all_begun.wait()
                return ScriptedPty(marks_prompt=False)

            return open_  # type: ignore[return-value]

        keys = [(f"env{i}", "lab") for i in range(30)]
        twice = [hub.get(key, opener(key[0])) for key in keys] + [hub.get(keys[0], opener("again"))]
        sessions = await asyncio.wait_for(asyncio.gather(*twice), 10)
        assert len(begun) == 30 and "again" not in begun  # the same key shared its open
        assert sessions[0] is sessions[-1]
        assert {s.key for s in sessions} == set(keys)
        await hub.close_all()

    asyncio.run(go())
