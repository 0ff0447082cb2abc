"""Where a profiled server's CPU went: a py-spy ``raw`` profile (collapsed stacks, one line per stack:
``frame;frame;...;frame count``) summed up as text. Used by ``rehearsal.py --profile``; also a script:

    .venv/bin/python bench/profile_summary.py server-profile.txt [--top 25]

py-spy samples every thread that is not idle (running Python, or in C code that holds or waits for
the GIL), ``rate`` times a second; a sample is about 1/rate CPU-seconds. Printed: the samples of the
event loop's thread against the worker threads; the functions the most samples were in at the top of
the stack (*self*); and, for the server's own code (middleware left out: every request passes it)
and SSE sending, the functions the most samples passed through (*inclusive*: a function counted once
per stack)."""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
#: where a frame's file lives decides whether it is shown in the inclusive table
SHOWN = ("labserver/", "sse_starlette/")
#: frames every request passes through (middleware): they would fill the inclusive table
WRAPPERS = ("Middleware.__call__", "RequestObserver.__call__", "tracking_send", "observed (")


def split(stack: str) -> list[str]:
    """The frames of one collapsed stack as ``function (file)`` (line numbers dropped, so the same
    function at two lines counts once)."""
    out = []
    for frame in stack.split(";"):
        m = FRAME.match(frame)
        out.append(f"{m['fn']} ({m['file']})" if m else frame)
    return out


def thread_of(frames: list[str]) -> str:
    text = ";".join(frames)
    if "_worker (concurrent/futures/thread.py)" in text:
        return "worker threads"
    if "_run_once (asyncio/base_events.py)" in text or "run_forever" in text:
        return "event loop"
    return "other"


def summarize(path: Path, *, top: int = 25, rate: int = 100) -> str:
    self_of: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in split(stack) if not f.startswith(("thread (", "process "))]
        if not frames:
            continue
        total += n
        threads[thread_of(frames)] += n
        self_of[frames[-1]] += n
        for fn in set(frames):
            if any(s in fn for s in SHOWN) and not any(w in fn for w in WRAPPERS):
                incl[fn] += n
    if not total:
        return f"  profile {path}: no samples"

    def share(n: int) -> str:
        return f"{n / rate:8.1f} s {100 * n / total:5.1f}%"

    lines = [f"  profile {path}: {total} samples, about {total / rate:.0f} CPU-s of the server"]
    lines += ["", "  by thread               CPU-s  share"]
    lines += [f"  {name:<20} {share(n)}" for name, n in threads.most_common()]
    lines += ["", "  self (top of the stack)                                          CPU-s  share"]
    lines += [f"  {fn[:62]:<62} {share(n)}" for fn, n in self_of.most_common(top)]
    lines += ["", "  inclusive (the server's own code, and SSE sending)                CPU-s  share"]
    lines += [f"  {fn[:62]:<62} {share(n)}" for fn, n in incl.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--rate", type=int, default=100, help="the samples per second py-spy took")
    args = ap.parse_args()
    print(summarize(args.profile, top=args.top, rate=args.rate))


if __name__ == "__main__":
    main()
