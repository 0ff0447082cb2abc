"""How often a waiting place is told: by band, so a queue that moves tells O(log n) of its n waiters.

A queue of n that hands one turn on moves every waiter up one place. Telling each of them (a live
event, an SSE write to their page) costs n events per turn: the load rehearsal's check queue of 300
made 300 events per admission, about 3,000 a second, and the server's core went to streaming them
while the grid and the joins waited (issue 30). So a waiter is told its exact place when it joins the
queue, and again only when its place enters another **band** (:func:`band`): places 1 to 6 are each
their own band, then the edges are 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, ... (ten a
decade, about a fifth apart). A turn handed on moves every place by one, so only the waiters on a
band's edge are told: at most one per band, 23 bands up to 300, 28 up to 1,000.

What a page shows is exact when told and at most one band too high until the next telling (a queue
moving forward: the number only ever goes down, in steps of about a fifth).

Used by the fair check queue (``check.queued``, :mod:`labserver.services.grading.fair_queue`) and by the
admission of environment starts (``env.queue``, :mod:`labserver.services.provisioning.admission`)."""

from __future__ import annotations

import bisect

#: band edges between 1 and 10, times each power of ten
NICE = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
EXACT_UP_TO = 6
EDGES = tuple(sorted({*range(1, EXACT_UP_TO + 1), *(round(e * 10**k) for k in range(9) for e in NICE)}))


def band(place: int) -> int:
    """The band of a waiting place (1 = next): the smallest edge at or above it. Each place up to
    :data:`EXACT_UP_TO` is its own band; beyond, the edges are 8, 10, 12, 15, 20, 25, 30, 40, ..."""
    i = bisect.bisect_left(EDGES, place)
    return EDGES[i] if i < len(EDGES) else place


def bands_up_to(n: int) -> int:
    """How many bands the places 1..n span: the most waiters one step of a queue of n tells."""
    return bisect.bisect_left(EDGES, band(n)) + 1
