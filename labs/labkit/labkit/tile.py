"""A small tile-programming emulator (the pypto-kda lab). It is **not** PyPTO: it borrows its
vocabulary (a kernel is a set of tasks over tiles; tiles live in typed on-chip buffers; Cube cores do
matrix products, Vector cores the rest; data moves are explicit) and charges every move and op to a
deterministic cost model, so a program's emulated time, moves and task count are the same on any CPU.

```python
from labkit import tile

k = tile.Kernel("matmul")
with k.task("mm", 0, 0):                      # one task of subgraph "mm" on an AI core
    a = k.load(A[0:64, 0:64], "L1")          # GM -> L1 (MTE2)
    b = k.load(B[0:64, 0:64], "L1")
    c = k.matmul(k.move(a, "L0A"), k.move(b, "L0B"))   # Cube, result in L0C
    k.store(c, C[0:64, 0:64])                # L0C -> GM (FixPipe)
print(k.report())
```

Buffers (A2/A3 sizes, ``reference/talks-and-hardware.md`` §AI Core on-chip buffers): UB 184 KiB usable
of 192, L1 512 KiB, L0A / L0B 64 KiB, L0C 128 KiB. A tile is allocated when it is made and freed at
the end of its task (or by :meth:`Kernel.free`); going over a buffer raises :class:`TileBudgetError`
naming the tile and the buffer. ``tile[i:j, a:b]`` is a view (no allocation, no move).

Scheduling: a task depends on every earlier task whose global-memory (GM) writes overlap what it reads
or writes (and on earlier readers of what it writes). Tasks run on the first free core of their kind
(Cube tasks on AIC cores, Vector tasks on AIV cores, a task with both on one of each) as soon as their
dependencies end. Inside a task, moves and ops run one after another.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

KiB = 1024

#: usable bytes of each on-chip buffer of one AI core (A2/A3)
BUFFERS: dict[str, int] = {
    "UB": 184 * KiB,
    "L1": 512 * KiB,
    "L0A": 64 * KiB,
    "L0B": 64 * KiB,
    "L0C": 128 * KiB,
}
CUBE_BUFFERS = ("L1", "L0A", "L0B", "L0C")


@dataclass(frozen=True)
class TileProfile:
    """Per-core rates of the emulated chip; every figure with its marker (see docs/labkit.md)."""

    name: str
    n_cube: int  # AIC cores [V]
    n_vector: int  # AIV cores [V]
    freq_hz: float  # 1.8 GHz [V]
    cube_macs_per_cycle: int  # 16x16x16 fp16 fractal [V]; fp32 at half rate [ASSUMED]
    vector_lanes_fp32: int  # fp32 elements per cycle per AIV [ASSUMED: 256 B/cycle]
    gm_bw: float  # bytes/s of one core to GM: HBM 1.6 TB/s shared by the AIC cores [ASSUMED]
    onchip_bw: float  # bytes/s L1 -> L0A/L0B, L0C -> L1 [ASSUMED: 256 B/cycle]
    op_latency_s: float  # issue latency of one instruction [ASSUMED]
    move_latency_s: float  # start-up of one DMA move from/to GM [ASSUMED]
    l2_latency_s: float  # one hop through the L2 cache, Cube <-> Vector [ASSUMED]
    task_overhead_s: float  # AICPU dispatch of one subgraph task [ASSUMED]

    @property
    def cube_flops_fp32(self) -> float:
        return 2 * self.cube_macs_per_cycle * self.freq_hz / 2

    @property
    def vector_elems_per_s(self) -> float:
        return self.vector_lanes_fp32 * self.freq_hz


PROFILES: dict[str, TileProfile] = {
    # Ascend 910B3 (the talk's KDA measurements): 20 AIC / 40 AIV at 1.8 GHz
    "910B3": TileProfile(
        "910B3", 20, 40, 1.8e9, 16**3, 64, 1.6e12 / 20, 256 * 1.8e9, 50e-9, 500e-9, 200e-9, 2e-6
    ),
    # Ascend 910B2 / one A3 die: 24 AIC / 48 AIV
    "910B": TileProfile(
        "910B", 24, 48, 1.8e9, 16**3, 64, 1.6e12 / 24, 256 * 1.8e9, 50e-9, 500e-9, 200e-9, 2e-6
    ),
}


class TileError(ValueError):
    """A tile used where the hardware cannot use it (wrong buffer, op outside a task, ...)."""


class TileBudgetError(MemoryError):
    """A tile does not fit its on-chip buffer."""

    def __init__(self, tile: str, buf: str, nbytes: int, used: int, task: str, holders: str = "") -> None:
        cap = BUFFERS[buf]
        super().__init__(
            f"tile '{tile}' ({nbytes / KiB:.2f} KiB) does not fit {buf}: {used / KiB:.2f} KiB of "
            f"{cap / KiB:.0f} KiB already in use in task '{task}' ({buf} budget {cap / KiB:.0f} KiB)"
            + (f"; biggest live tiles in {buf}: {holders}" if holders else "")
        )
        self.tile, self.buffer, self.nbytes, self.used, self.task = tile, buf, nbytes, used, task


def _fit(busy: list[tuple[float, float]], ready: float, dur: float) -> float:
    """The earliest start >= ready of a gap of ``dur`` between a core's sorted busy intervals."""
    at = ready
    for a, b in busy:
        if b <= at:
            continue
        if a >= at + dur:
            break
        at = b
    return at


def _pad16(n: int) -> int:
    return 16 * math.ceil(n / 16)


@dataclass(eq=False)
class Tile:
    """A tensor living in one on-chip buffer of the current task."""

    data: torch.Tensor
    buf: str
    name: str
    task: Task
    owner: Tile | None = None  # a view's base tile (the view owns no bytes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def __getitem__(self, idx: Any) -> Tile:
        return Tile(self.data[idx], self.buf, f"{self.name}[view]", self.task, self.owner or self)

    def __repr__(self) -> str:
        return f"Tile({self.name!r}, {self.buf}, shape={self.shape})"


@dataclass(eq=False)
class Task:
    name: str
    index: int
    subgraph: str
    cube_s: float = 0.0
    vector_s: float = 0.0
    move_s: float = 0.0
    reads: list[Region] = field(default_factory=list)
    writes: list[Region] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BUFFERS, 0))
    live: list[Tile] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    closed: bool = False

    @property
    def kind(self) -> str:
        if self.cube_s and self.vector_s:
            return "mix"
        return "cube" if self.cube_s else "vector"

    @property
    def busy_s(self) -> float:
        return self.cube_s + self.vector_s + self.move_s


class Region:
    """The bytes a GM view touches: a span for a fast test, the exact element offsets on demand."""

    __slots__ = ("ptr", "start", "end", "_view", "_offsets")

    def __init__(self, t: torch.Tensor) -> None:
        es = t.element_size()
        self.ptr = t.untyped_storage().data_ptr()
        self.start = t.storage_offset() * es
        extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0
        self.end = self.start + extent * es
        self._view = (tuple(t.shape), tuple(t.stride()), t.storage_offset(), es, t.is_contiguous())
        self._offsets: torch.Tensor | None = None

    def offsets(self) -> torch.Tensor:
        if self._offsets is None:
            shape, stride, off, es, _ = self._view
            n = int(off) + 1 + sum((int(a) - 1) * int(b) for a, b in zip(shape, stride, strict=True))
            self._offsets = torch.arange(n).as_strided(shape, stride, off).flatten() * es
        return self._offsets

    def overlaps(self, other: Region) -> bool:
        if self.ptr != other.ptr or not (self.start < other.end and other.start < self.end):
            return False
        if self._view[4] and other._view[4]:
            return True
        return bool(torch.isin(self.offsets(), other.offsets()).any())


class Kernel:
    """One emulated operator: tasks over tiles, charged to the cost model of ``profile``."""

    def __init__(self, name: str = "kernel", profile: str = "910B3") -> None:
        self.name = name
        self.profile = PROFILES[profile]
        self.tasks: list[Task] = []
        self._task: Task | None = None
        self.moves: dict[str, int] = {}  # "GM->UB" -> count
        self.move_bytes: dict[str, int] = {}
        self.cube_flops = 0  # useful FLOPs of Cube matmuls
        self.vector_elems = 0
        self.matmul_shapes: list[tuple[int, int, int]] = []
        self.peak: dict[str, int] = dict.fromkeys(BUFFERS, 0)
        self.ops: dict[str, int] = {}

    # -- tasks ---------------------------------------------------------------------------------
    @contextmanager
    def task(self, subgraph: str, *index: int) -> Iterator[Task]:
        """One task of ``subgraph`` (its loop ``index`` for the name): its tiles live until it ends;
        it runs on one core (two for a mix)."""
        name = f"{subgraph}{list(index)}" if index else subgraph
        if self._task is not None:
            raise TileError(f"task '{name}' opened inside task '{self._task.name}': tasks do not nest")
        t = Task(name, len(self.tasks), subgraph)
        self._task = t
        try:
            yield t
        finally:
            self._task = None
        t.closed = True
        t.live.clear()
        self.tasks.append(t)

    def _cur(self, what: str) -> Task:
        if self._task is None:
            raise TileError(f"{what} outside a task: wrap it in `with k.task(...)`")
        return self._task

    def _alloc(self, data: torch.Tensor, buf: str, name: str) -> Tile:
        task = self._cur(f"tile '{name}'")
        if buf not in BUFFERS:
            raise TileError(f"unknown buffer {buf!r} for tile '{name}': one of {', '.join(BUFFERS)}")
        tile = Tile(data.contiguous(), buf, name, task)
        used = task.used[buf]
        if used + tile.nbytes > BUFFERS[buf]:
            live = sorted((t for t in task.live if t.buf == buf), key=lambda t: -t.nbytes)[:4]
            holders = ", ".join(f"'{t.name}' {t.nbytes / KiB:.2f} KiB" for t in live)
            raise TileBudgetError(name, buf, tile.nbytes, used, task.name, holders)
        task.used[buf] = used + tile.nbytes
        self.peak[buf] = max(self.peak[buf], task.used[buf])
        task.live.append(tile)
        return tile

    def free(self, tile: Tile) -> None:
        """Give a tile's bytes back to its buffer before the task ends."""
        task = self._cur(f"free('{tile.name}')")
        if tile.owner is not None or tile not in task.live:
            raise TileError(f"free('{tile.name}'): not a live tile of task '{task.name}'")
        task.live.remove(tile)
        task.used[tile.buf] -= tile.nbytes

    def _check(self, tile: Tile, bufs: tuple[str, ...], what: str) -> None:
        if not isinstance(tile, Tile):
            raise TileError(f"{what}: expected a Tile, got {type(tile).__name__}")
        if tile.task is not self._task or (tile.owner or tile) not in tile.task.live:
            raise TileError(
                f"{what}: tile '{tile.name}' is not live in this task (tiles end with their task)"
            )
        if tile.buf not in bufs:
            raise TileError(f"{what}: tile '{tile.name}' is in {tile.buf}; it must be in {' or '.join(bufs)}")

    def _move(self, path: str, nbytes: int, seconds: float) -> None:
        task = self._cur(f"move {path}")
        self.moves[path] = self.moves.get(path, 0) + 1
        self.move_bytes[path] = self.move_bytes.get(path, 0) + nbytes
        task.move_s += seconds

    # -- data moves ----------------------------------------------------------------------------
    def load(self, gm: torch.Tensor, buf: str = "UB", name: str = "") -> Tile:
        """GM -> UB or L1 (MTE2)."""
        task = self._cur("load")
        if buf not in ("UB", "L1"):
            raise TileError(
                f"load into {buf}: GM loads go to UB (Vector) or L1 (Cube); then move L1 -> L0A/L0B"
            )
        tile = self._alloc(gm.detach().to(torch.float32).clone(), buf, name or f"load{len(task.reads)}")
        task.reads.append(Region(gm))
        p = self.profile
        self._move(f"GM->{buf}", tile.nbytes, p.move_latency_s + tile.nbytes / p.gm_bw)
        return tile

    def store(self, tile: Tile, gm: torch.Tensor) -> None:
        """UB or L0C -> GM (MTE3 / FixPipe), into the view ``gm`` (same shape)."""
        task = self._cur("store")
        self._check(tile, ("UB", "L0C"), "store")
        if tuple(gm.shape) != tile.shape:
            raise TileError(
                f"store: tile '{tile.name}' has shape {tile.shape}, the GM view {tuple(gm.shape)}"
            )
        gm.copy_(tile.data.to(gm.dtype))
        task.writes.append(Region(gm))
        p = self.profile
        self._move(f"{tile.buf}->GM", tile.nbytes, p.move_latency_s + tile.nbytes / p.gm_bw)

    def move(self, tile: Tile, buf: str, name: str = "") -> Tile:
        """Between on-chip buffers: L1 -> L0A/L0B, L0C -> L1 at on-chip speed; UB <-> L1/L0A/L0B and
        L0C -> UB cross between the Vector and the Cube core: written to and read back from the L2
        cache (two hops, each ``l2_latency_s`` plus the bytes at twice a core's GM bandwidth)."""
        self._check(tile, tuple(BUFFERS), "move")
        p = self.profile
        onchip = (tile.buf, buf) in {("L1", "L0A"), ("L1", "L0B"), ("L0C", "L1")}
        if not onchip and tile.buf == buf:
            raise TileError(f"move: tile '{tile.name}' is already in {buf}")
        if buf == "L0C":
            raise TileError("move into L0C: only Cube matmuls write L0C")
        out = self._alloc(tile.data.clone(), buf, name or f"{tile.name}@{buf}")
        n = out.nbytes
        secs = p.op_latency_s + n / p.onchip_bw if onchip else 2 * (p.l2_latency_s + n / (2 * p.gm_bw))
        self._move(f"{tile.buf}->{buf}", n, secs)
        return out

    # -- Cube ------------------------------------------------------------------------------------
    def matmul(
        self, a: Tile, b: Tile, acc: Tile | None = None, name: str = "", b_trans: bool = False
    ) -> Tile:
        """Cube: ``a @ b`` (``a @ b.T`` with ``b_trans``), a in L0A, b in L0B, result in L0C;
        with ``acc`` (an L0C tile) the product is added into it and ``acc`` is returned.
        Work is padded to the 16x16x16 fractal: an M=1 product costs as much as M=16."""
        task = self._cur("matmul")
        self._check(a, ("L0A",), "matmul left operand")
        self._check(b, ("L0B",), "matmul right operand")
        if a.data.dim() != 2 or b.data.dim() != 2:
            raise TileError("matmul: operands must be 2-D tiles")
        bd = b.data.T if b_trans else b.data
        m, kk = a.shape
        if bd.shape[0] != kk:
            raise TileError(
                f"matmul: '{a.name}' {a.shape} @ '{b.name}' {tuple(bd.shape)}: inner sizes differ"
            )
        n = bd.shape[1]
        prod = a.data @ bd
        if acc is not None:
            self._check(acc, ("L0C",), "matmul accumulator")
            if acc.shape != (m, n):
                raise TileError(f"matmul: accumulator '{acc.name}' is {acc.shape}, the product ({m}, {n})")
            acc.data += prod
            out = acc
        else:
            out = self._alloc(prod, "L0C", name or f"mm{len(self.matmul_shapes)}")
        p = self.profile
        self.cube_flops += 2 * m * kk * n
        self.matmul_shapes.append((m, kk, n))
        self.ops["matmul"] = self.ops.get("matmul", 0) + 1
        task.cube_s += p.op_latency_s + 2 * _pad16(m) * _pad16(kk) * _pad16(n) / p.cube_flops_fp32
        return out

    # -- Vector ----------------------------------------------------------------------------------
    def vec(
        self, op: str, fn: Callable[..., torch.Tensor], *tiles: Tile, name: str = "", passes: int = 1
    ) -> Tile:
        """Vector: ``fn`` over the data of UB tiles, result in a new UB tile. Charged per element of
        the largest of the inputs and the output, ``passes`` times."""
        task = self._cur(op)
        for t in tiles:
            self._check(t, ("UB",), f"vector op {op}")
        out = fn(*(t.data for t in tiles))
        if not isinstance(out, torch.Tensor):
            out = torch.tensor(out, dtype=torch.float32)
        elems = max([out.numel()] + [t.data.numel() for t in tiles]) * passes
        res = self._alloc(out.to(torch.float32), "UB", name or f"{op}{self.ops.get(op, 0)}")
        p = self.profile
        self.vector_elems += elems
        self.ops[op] = self.ops.get(op, 0) + 1
        task.vector_s += p.op_latency_s + math.ceil(elems / p.vector_lanes_fp32) / p.freq_hz
        return res

    def add(self, a: Tile, b: Tile, name: str = "") -> Tile:
        return self.vec("add", torch.add, a, b, name=name)

    def sub(self, a: Tile, b: Tile, name: str = "") -> Tile:
        return self.vec("sub", torch.sub, a, b, name=name)

    def mul(self, a: Tile, b: Tile, name: str = "") -> Tile:
        return self.vec("mul", torch.mul, a, b, name=name)

    def muls(self, a: Tile, s: float, name: str = "") -> Tile:
        return self.vec("muls", lambda x: x * s, a, name=name)

    def exp(self, a: Tile, name: str = "") -> Tile:
        return self.vec("exp", torch.exp, a, name=name)

    def neg(self, a: Tile, name: str = "") -> Tile:
        return self.vec("neg", torch.neg, a, name=name)

    def sum(self, a: Tile, dim: int, keepdim: bool = True, name: str = "") -> Tile:
        return self.vec("sum", lambda x: x.sum(dim, keepdim=keepdim), a, name=name)

    def tril(self, a: Tile, diagonal: int = 0, name: str = "") -> Tile:
        return self.vec("tril", lambda x: torch.tril(x, diagonal), a, name=name)

    def zeros(self, shape: tuple[int, ...], buf: str = "UB", name: str = "") -> Tile:
        """A zero tile (UB: a Vector dup; L0C: a cleared accumulator)."""
        task = self._cur("zeros")
        if buf not in ("UB", "L0C"):
            raise TileError(f"zeros in {buf}: only UB (Vector) and L0C (accumulator) tiles can be cleared")
        t = self._alloc(torch.zeros(shape), buf, name or "zeros")
        task.vector_s += self.profile.op_latency_s if buf == "UB" else 0.0
        task.cube_s += self.profile.op_latency_s if buf == "L0C" else 0.0
        return t

    def const(self, data: torch.Tensor, name: str = "") -> Tile:
        """A constant UB tile (a mask, an identity): one Vector pass to write it."""
        task = self._cur("const")
        t = self._alloc(data.detach().to(torch.float32).clone(), "UB", name or "const")
        p = self.profile
        self.vector_elems += t.data.numel()
        task.vector_s += p.op_latency_s + math.ceil(t.data.numel() / p.vector_lanes_fp32) / p.freq_hz
        return t

    def transpose(self, a: Tile, name: str = "") -> Tile:
        """Vector transpose of a 2-D UB tile."""
        return self.vec("transpose", lambda x: x.T, a, name=name)

    def assign(self, dst: Tile, src: Tile) -> None:
        """Vector copy of ``src`` into ``dst`` (a UB tile or a view of one), e.g. to assemble blocks."""
        task = self._cur("assign")
        self._check(dst, ("UB",), "assign destination")
        self._check(src, ("UB",), "assign source")
        if dst.shape != src.shape:
            raise TileError(f"assign: '{src.name}' {src.shape} into '{dst.name}' {dst.shape}")
        dst.data.copy_(src.data)
        p = self.profile
        self.ops["assign"] = self.ops.get("assign", 0) + 1
        self.vector_elems += src.data.numel()
        task.vector_s += p.op_latency_s + math.ceil(src.data.numel() / p.vector_lanes_fp32) / p.freq_hz

    # -- the schedule ----------------------------------------------------------------------------
    def schedule(self) -> float:
        """Place every task (issue order, dependencies from GM overlaps) in the earliest gap of a free
        core of its kind (a mix task needs a Cube and a Vector core at once); the makespan in seconds."""
        p = self.profile
        pools: dict[str, list[list[tuple[float, float]]]] = {
            "cube": [[] for _ in range(p.n_cube)],
            "vector": [[] for _ in range(p.n_vector)],
        }
        done: list[Task] = []
        for t in self.tasks:
            ready = 0.0
            for d in done:
                if d.end <= ready:
                    continue
                if any(w.overlaps(x) for w in d.writes for x in t.reads + t.writes) or any(
                    r.overlaps(w) for r in d.reads for w in t.writes
                ):
                    ready = d.end
            dur = p.task_overhead_s + t.busy_s
            kinds = {"cube": ["cube"], "vector": ["vector"], "mix": ["cube", "vector"]}[t.kind]
            start = ready
            while True:
                fits = [min((_fit(c, start, dur), i) for i, c in enumerate(pools[kind])) for kind in kinds]
                latest = max(f[0] for f in fits)
                if latest == start:
                    break
                start = latest
            for kind, (_, i) in zip(kinds, fits, strict=True):
                bisect.insort(pools[kind][i], (start, start + dur))
            t.start, t.end = start, start + dur
            done.append(t)
        return max((t.end for t in self.tasks), default=0.0)

    def report(self) -> dict[str, Any]:
        """The figures of the whole kernel (time in µs, emulated)."""
        makespan = self.schedule()
        cube_s = sum(t.cube_s for t in self.tasks)
        vec_s = sum(t.vector_s for t in self.tasks)
        busy = sum(t.busy_s + self.profile.task_overhead_s for t in self.tasks)
        events = sorted(
            [(t.start, 1) for t in self.tasks] + [(t.end, -1) for t in self.tasks], key=lambda e: (e[0], e[1])
        )
        conc = best = 0
        for _, d in events:
            conc += d
            best = max(best, conc)
        cores = self.profile.n_cube + self.profile.n_vector
        return {
            "kernel": self.name,
            "profile": self.profile.name,
            "time_us": makespan * 1e6,
            "tasks": len(self.tasks),
            "subgraphs": len({t.subgraph for t in self.tasks}),
            "cube_us": cube_s * 1e6,
            "vector_us": vec_s * 1e6,
            "move_us": sum(t.move_s for t in self.tasks) * 1e6,
            "cube_share": cube_s / (cube_s + vec_s) if cube_s + vec_s else 0.0,
            "cube_flops": self.cube_flops,
            "vector_elems": self.vector_elems,
            "moves": sum(self.moves.values()),
            "move_bytes": sum(self.move_bytes.values()),
            "moves_by_path": dict(self.moves),
            "matmuls": len(self.matmul_shapes),
            "matmul_m": sorted({s[0] for s in self.matmul_shapes}),
            "max_parallel": best,
            "utilisation": busy / (makespan * cores) if makespan else 0.0,
            "peak_bytes": dict(self.peak),
            "ops": dict(self.ops),
        }
