"""No attempt lost to the platform (issue 22): a check the platform could not run is *not gradable*.

A check that errors because of the platform, not the attendee's work, says nothing about that work.
It is recorded with status ``not_gradable``, shown to the attendee as "not your fault, retried"
(EN/ZH), retried once automatically, and never counts: not an attempt in the grid or the export,
not a failure for the stuck detector (``models.NOT_ATTEMPTS``).

What is the platform's fault is one table, by the ``reason`` label of the :class:`BackendError` the
check met (``backends/``):

=====================================  =========  ===============================================
reason                                 platform?  why
=====================================  =========  ===============================================
engine-down, docker, node              yes        the lab machine or its engine does not answer
gone, crashed, not-ready, seed         yes        the environment died or did not come back
capacity, no-room, no-card, disk       yes        the server is out of room (not the attendee's
                                                  workspace: that is ``disk-full``)
image-missing, sandbox, grader-start   yes        the server's setup: image, bubblewrap, a grader
                                                  container that never ran the checker
checker-start                          yes        the server's setup: its Python is out of reach of
                                                  the environment's uid (root, no bubblewrap:
                                                  ``labserver doctor``, check ``runtime``)
load                                   yes        not an error but a timeout the machine caused: the
                                                  check's work waited for a CPU instead of running
                                                  (:func:`labserver.checks.timeouts.blame`, rules
                                                  there; the verdict comes back ``not_gradable``,
                                                  reason ``checks.verdict.LOAD``)
lab-missing                            no         the attendee removed the lab folder (reset it)
disk-full                              no         the attendee's workspace is full
path, too-big                          no         what the attendee asked for
anything else                          no         shown as it is (a checker error stays an error)
=====================================  =========  ===============================================

A server restart mid-check is the platform's too: :mod:`labserver.services.operations.recovery` finishes the
run as ``not_gradable`` at start and the check is pressed again for the attendee (once).

The retry is the one automatic retry: a retried check that is again not gradable stays so, with a
message that says to try later or raise a hand. An attendee who makes the platform fail on purpose
(killing the grader from inside, say) gains no pass and no lost attempt, only "not gradable".
"""

from __future__ import annotations

from labserver.backends.base import BackendError
from labserver.checks.verdict import LOAD
from labserver.i18n import gettext

PLATFORM_REASONS = frozenset(
    {
        "engine-down",
        "docker",
        "node",
        "gone",
        "crashed",
        "not-ready",
        "seed",
        "capacity",
        "no-room",
        "no-card",
        "disk",
        "image-missing",
        "sandbox",
        "grader-start",
        "checker-start",
        "restart",
        LOAD,
    }
)


def is_platform_fault(exc: BackendError) -> bool:
    """Whether the check met the platform's failure, not the attendee's (the table above)."""
    return exc.reason in PLATFORM_REASONS


def message(lang: str, reason: str, *, retried: bool) -> str:
    """What the attendee reads on a not-gradable run: first "retried", after the retry "try later";
    a checker that cannot start says so (pressing again cannot help until the server is fixed); a
    timeout the machine caused (``LOAD``) says the server was too busy."""
    if reason == "checker-start":
        return gettext(lang, "Not your fault: this server cannot start checkers (its Python is out of reach of your environment's user), so no check can run until the instructor fixes the server (labserver doctor says how). It does not count as an attempt.")  # noqa: E501  # fmt: skip
    if reason == LOAD:
        if not retried:
            return gettext(lang, "Not your fault: the server was too busy to finish this check in time (it waited for a processor more than it ran). It does not count as an attempt and was retried automatically.")  # noqa: E501  # fmt: skip
        return gettext(lang, "Not your fault: the server was still too busy to finish this check in time after an automatic retry. It does not count as an attempt: press Check in a minute, or raise your hand.")  # noqa: E501  # fmt: skip
    if not retried:
        first = gettext(lang, "Not your fault: the platform could not run this check (%(reason)s). It does not count as an attempt and was retried automatically.")  # noqa: E501  # fmt: skip
        return first % {"reason": reason}
    again = gettext(lang, "Not your fault: the platform could not run this check, again after an automatic retry (%(reason)s). It does not count as an attempt: press Check in a minute, or raise your hand.")  # noqa: E501  # fmt: skip
    return again % {"reason": reason}
