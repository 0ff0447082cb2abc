"""A shell script as a step's check (a Killercoda ``verify.sh``): exit status 0 passes, anything
else fails, and what the script printed is the message.

The script is the lab's (it comes with the checker, never from the workspace), but what it looks
at is the attendee's: it runs through :func:`~labkit.check.run_script`, in a child process in the
lab folder with the result channel closed, the ``LAB_*`` secrets removed, time and memory limits,
and ``HOME`` set to the lab folder (a scenario's ``~`` is where the attendee works). So a script
that sources an attendee's file, or an attendee's program it calls, can print or exit as it likes:
it never writes the verdict, and a timeout or a signal is a failure, not a pass."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .runner import run_script
from .verdict import Failure, msg

__all__ = ["shell_check"]

#: the last lines of the script's output shown in the message
MAX_LINES = 20


def _tail(text: str) -> str:
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return "\n".join(lines[-MAX_LINES:])


def shell_check(script: str | os.PathLike[str], *, timeout: float = 30) -> Callable[[], str]:
    """A check function for :func:`~labkit.check.main` that runs ``bash script`` in the lab folder."""
    path = Path(script)

    def check() -> str:
        out = run_script(["bash", str(path)], timeout=timeout, env={"HOME": os.getcwd()})
        said = _tail(out.stdout + ("\n" + out.stderr if out.stderr.strip() else ""))
        if out.timed_out:
            raise Failure(
                msg(
                    f"{path.name} did not finish in {timeout:g} s (does it wait for something that is not there yet?)",
                    f"{path.name} 没有在 {timeout:g} 秒内结束（它是否在等一个还不存在的东西？）",
                )
                + (f"\n{said}" if said else "")
            )
        if out.exit_code == 0:
            done = msg("Done: this step's check passed.", "完成：这一步的检查通过了。")
            return done + (f"\n{said}" if said else "")
        head = msg(
            f"Not yet: this step's check ({path.name}) exited with status {out.exit_code}.",
            f"还没有完成：这一步的检查（{path.name}）以状态 {out.exit_code} 退出。",
        )
        raise Failure(head + (f"\n{said}" if said else ""))

    return check
