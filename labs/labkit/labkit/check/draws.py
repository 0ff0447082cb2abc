"""Inputs a check draws: unseen on every press, and on every press the boundary cases too.

A check must not pass a wrong answer on one press in three. Drawing inputs at random from the
run id gives every press inputs the attendee has not seen, but random draws rarely land where
wrong code differs from right code: a length that the chunk size does not divide, a batch where
``torch.chunk`` and ``torch.tensor_split`` disagree, a value one ulp under a power of two, a point
just below a kink of a piecewise figure. The rules here:

- **One seed helper.** :func:`run_seed` derives a seed from ``LAB_RUN_ID`` (fresh per press, a
  random one when unset, as on a bare ``python check.py``), the lab, the step and a ``salt`` naming
  the draw, and never returns the seeds the workspace's own scripts use (``avoid``).
- **Boundaries on every press, positions drawn.** Each ``Draws`` method returns the boundary
  values of its kind, with the free parts (which power of two, which kink, which offset) drawn
  from the seed, so the verdict never depends on which press it is while the inputs still change.
- **Pure Python and deterministic** for one seed (no torch needed, except :meth:`Draws.float_edges`
  which returns Python floats computed from the dtype's spacing).

Typical use::

    d = Draws("chunked-prefill")
    T = d.not_divisible(64, 200, by=chunk)      # the last chunk is short
    b = d.chunk_split_differs(parts=3)          # torch.chunk != tensor_split for this size
    xs = d.around([0.5, 2.0], rel=1e-3)        # just below, at and just above each kink
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from collections.abc import Iterable, Sequence

__all__ = ["Draws", "run_seed"]


def run_seed(salt: str = "", *, avoid: Iterable[int] = (0, 1), bits: int = 31) -> int:
    """A seed of this check run: ``LAB_RUN_ID`` (a fresh random id when unset), ``LAB_ID``,
    ``LAB_STEP`` and ``salt``; never one of ``avoid`` (the seeds the workspace's scripts use)."""
    run_id = os.environ.get("LAB_RUN_ID") or os.urandom(8).hex()
    key = "/".join((os.environ.get("LAB_ID", ""), os.environ.get("LAB_STEP", ""), run_id, salt))
    digest = hashlib.sha256(key.encode()).digest()
    seed = int.from_bytes(digest[:8], "big") % (1 << bits)
    avoid = set(avoid)
    while seed in avoid:
        seed = (seed + 1) % (1 << bits)
    return seed


class Draws:
    """Boundary-biased draws from one seed (:func:`run_seed` of ``salt`` unless ``seed`` is given)."""

    def __init__(self, salt: str = "", *, seed: int | None = None, avoid: Iterable[int] = (0, 1)):
        self.seed = run_seed(salt, avoid=avoid) if seed is None else int(seed)
        self.random = random.Random(self.seed)

    # -- integers -----------------------------------------------------------------------------
    def integer(self, lo: int, hi: int) -> int:
        """Uniform in ``[lo, hi]``."""
        return self.random.randint(lo, hi)

    def not_divisible(self, lo: int, hi: int, *, by: int) -> int:
        """A size in ``[lo, hi]`` that ``by`` does not divide, with a remainder drawn from both
        ends (1 and ``by - 1`` are the likeliest to expose an off-by-one in the last chunk)."""
        if by < 2:
            raise ValueError(f"by must be at least 2, got {by}")
        rem = self.random.choice([1, by - 1, self.random.randint(1, by - 1)])
        base = self.random.randint(max(0, (lo - rem + by - 1) // by), max(0, (hi - rem) // by))
        n = base * by + rem
        if not lo <= n <= hi:
            raise ValueError(f"no size in [{lo}, {hi}] leaves remainder {rem} modulo {by}")
        return n

    def divisible(self, lo: int, hi: int, *, by: int) -> int:
        """A size in ``[lo, hi]`` that ``by`` divides (the even case, beside an uneven one)."""
        first, last = -(-lo // by), hi // by
        if first > last:
            raise ValueError(f"no multiple of {by} in [{lo}, {hi}]")
        return self.random.randint(first, last) * by

    def chunk_split_differs(self, parts: int, lo: int = 2, hi: int = 64) -> int:
        """A size ``n`` in ``[lo, hi]`` where ``torch.chunk(n, parts)`` and
        ``torch.tensor_split(n, parts)`` give different sizes (``chunk`` uses ceil(n / parts)
        per piece and may return fewer pieces; ``tensor_split`` spreads the remainder)."""
        sizes = [n for n in range(max(lo, parts), hi + 1) if chunk_sizes(n, parts) != split_sizes(n, parts)]
        if not sizes:
            raise ValueError(f"chunk and tensor_split agree on every size in [{lo}, {hi}] for {parts} parts")
        return self.random.choice(sizes)

    def uneven_split(self, n: int, parts: int) -> list[int]:
        """``parts`` positive sizes adding up to ``n``, not all equal (some part one larger or smaller
        than the others), in a drawn order."""
        if parts < 2 or n < parts + 1:
            raise ValueError(f"cannot split {n} unevenly into {parts} positive parts")
        sizes = split_sizes(n, parts)
        if len(set(sizes)) == 1:  # n divisible: move one element between two parts
            sizes[0] += 1
            sizes[-1] -= 1
        self.random.shuffle(sizes)
        return sizes

    def pow2_edges(self, lo_exp: int, hi_exp: int) -> list[int]:
        """``2**k - 1``, ``2**k`` and ``2**k + 1`` for one ``k`` drawn in ``[lo_exp, hi_exp]``."""
        k = self.random.randint(lo_exp, hi_exp)
        return [2**k - 1, 2**k, 2**k + 1]

    def same_total_shapes(self, total: int, dims: int = 2, count: int = 2) -> list[tuple[int, ...]]:
        """``count`` different shapes of ``dims`` dimensions with ``total`` elements each (equal
        counts in different shapes: code that flattens wrongly still gets the count right)."""
        divisors = [d for d in range(1, total + 1) if total % d == 0]
        shapes: set[tuple[int, ...]] = set()
        for _ in range(200):
            rest, shape = total, []
            for _ in range(dims - 1):
                d = self.random.choice([x for x in divisors if rest % x == 0])
                shape.append(d)
                rest //= d
            shapes.add((*shape, rest))
            if len(shapes) >= count:
                break
        if len(shapes) < count:
            raise ValueError(f"{total} has fewer than {count} shapes of {dims} dimensions")
        return sorted(shapes)[:count]

    # -- real numbers -------------------------------------------------------------------------
    def around(self, kinks: Sequence[float], *, rel: float = 1e-3, absolute: float = 0.0) -> list[float]:
        """For every kink of a piecewise figure: just below it, at it and just above it (the offset
        drawn between ``rel/2`` and ``rel`` of the kink, or ``absolute`` when the kink is 0)."""
        out = []
        for k in kinks:
            step = abs(k) * rel * self.random.uniform(0.5, 1.0) if k else absolute or rel
            out += [k - step, k, k + step]
        return out

    def magnitudes(self, *, lo_exp: int = -12, hi_exp: int = 12) -> list[float]:
        """Scales at both extremes of ``2**lo_exp .. 2**hi_exp`` and one drawn between them."""
        return [
            2.0 ** (lo_exp + self.random.randint(0, 2)),
            2.0 ** self.random.randint(lo_exp, hi_exp),
            2.0 ** (hi_exp - self.random.randint(0, 2)),
        ]

    def float_edges(self, dtype: str = "float32", *, lo_exp: int = -8, hi_exp: int = 8) -> list[float]:
        """Around one power of two ``2**k`` (``k`` drawn): the largest value of ``dtype`` below it
        (one ulp under: where ``floor(log2(x))`` computed in floating point rounds up), the power
        itself and the next value above it. ``dtype``: ``float32``, ``float16`` or ``bfloat16``."""
        mantissa = {"float32": 23, "float16": 10, "bfloat16": 7}[dtype]
        k = self.random.randint(lo_exp, hi_exp)
        p = 2.0**k
        return [p - p * 2.0 ** -(mantissa + 1), p, p + p * 2.0**-mantissa]

    def ties(self, grid: Sequence[float], count: int = 4) -> list[float]:
        """``count`` values exactly halfway between neighbours of the sorted ``grid`` (rounding
        modes differ only there)."""
        g = sorted(grid)
        mids = [(a + b) / 2 for a, b in zip(g, g[1:], strict=False) if a != b]
        return [self.random.choice(mids) for _ in range(count)]

    def shuffle(self, items: list) -> list:  # type: ignore[type-arg]
        """``items`` in a drawn order (in place, returned for chaining)."""
        self.random.shuffle(items)
        return items


def chunk_sizes(n: int, parts: int) -> list[int]:
    """The sizes ``torch.chunk`` gives for a dimension of ``n`` in ``parts`` (without torch)."""
    size = math.ceil(n / parts)
    return [min(size, n - i) for i in range(0, n, size)] if n else []


def split_sizes(n: int, parts: int) -> list[int]:
    """The sizes ``torch.tensor_split`` gives for a dimension of ``n`` in ``parts``."""
    q, r = divmod(n, parts)
    return [q + 1] * r + [q] * (parts - r)
