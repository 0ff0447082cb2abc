"""Named hardware profiles for the emulated device, each constant with its source.

Every number here is also listed in the constants table of ``docs/labkit.md``; a test
checks that the two agree. Markers follow ``reference/talks-and-hardware.md``:
``V`` verified in the cited source, ``V-secondary`` verified in a report of the source,
``UNVERIFIED`` plausible but not confirmed in a primary source, ``DERIVED`` computed from
other constants, ``ASSUMED`` a modelling choice of labkit with no hardware source.

Profiles describe the *real* hardware. A session scales capacity and every rate
(bandwidths, FLOP/s) by the same toy factor (default ``2**-10``: 64 GiB -> 64 MiB), so a toy
model sized like the real one at that ratio takes the same emulated time as the real model.
Per-launch overheads are not scaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GiB = 2**30
TB = 1e12
GB = 1e9
TFLOPS = 1e12
US = 1e-6

#: default toy factor: 64 GiB of HBM become 64 MiB, 1.6 TB/s become ~1.56 GB/s.
DEFAULT_SCALE = 2.0**-10


@dataclass(frozen=True)
class Constant:
    """One hardware figure: value in SI units (bytes, bytes/s, FLOP/s, seconds)."""

    value: float
    unit: str
    source: str
    marker: str


@dataclass(frozen=True)
class HostProfile:
    """The host CPU that runs "CPU experts" and feeds the device over the link."""

    name: str
    description: str
    mem_bandwidth: Constant
    flops: Constant


@dataclass(frozen=True)
class DeviceProfile:
    """One device (one die) plus its host and host<->device link."""

    name: str
    description: str
    hbm_capacity: Constant
    hbm_bandwidth: Constant
    #: peak dense FLOP/s by dtype name ("fp16", "bf16", "fp32", "int8", "fp8", "mxfp8", "mxfp4", ...)
    peak_flops: dict[str, Constant]
    h2d_bandwidth: Constant
    d2h_bandwidth: Constant
    launch_overhead: Constant
    graph_launch_overhead: Constant
    host: HostProfile
    aliases: tuple[str, ...] = field(default=())

    def peak(self, dtype: str | None) -> float:
        """Peak FLOP/s for ``dtype``; unknown or unsupported dtypes use the fp16 rate.

        MX formats use their own peak only where the chip has MX units (950); elsewhere they
        are computed after dequantisation at the fp16 rate (the bytes saved still count).
        """
        key = _DTYPE_ALIASES.get((dtype or "fp16").lower(), (dtype or "fp16").lower())
        if key in self.peak_flops:
            return self.peak_flops[key].value
        return self.peak_flops["fp16"].value

    def constants(self) -> dict[str, Constant]:
        """Flat name -> constant map (for the docs table and reports)."""
        out: dict[str, Constant] = {
            "hbm_capacity": self.hbm_capacity,
            "hbm_bandwidth": self.hbm_bandwidth,
            "h2d_bandwidth": self.h2d_bandwidth,
            "d2h_bandwidth": self.d2h_bandwidth,
            "launch_overhead": self.launch_overhead,
            "graph_launch_overhead": self.graph_launch_overhead,
            "host_mem_bandwidth": self.host.mem_bandwidth,
            "host_flops": self.host.flops,
        }
        for dtype, const in self.peak_flops.items():
            out[f"peak_flops.{dtype}"] = const
        return out


_DTYPE_ALIASES = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "torch.float32": "fp32",
    "torch.int8": "int8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "hif8": "fp8",
    "w8a8": "int8",
}

_REF = "reference/talks-and-hardware.md"
_SIM = "public serving-simulator config DeviceType.ASCEND910B2_376T_64G (" + _REF + " §0.5)"
_PCIE = Constant(
    64 * GB, "B/s", "PCIe 5.0 x16 per direction, commonly cited for 910B (" + _REF + " §0.5)", "UNVERIFIED"
)
_LAUNCH = Constant(
    20 * US,
    "s",
    "eager per-kernel dispatch cost; order of magnitude chosen so a toy decode step shows the "
    "eager-vs-graph gap of Hy3 on A3 (293 -> 33 ms/token, " + _REF + " Lab 2)",
    "ASSUMED",
)
_GRAPH_LAUNCH = Constant(
    1 * US,
    "s",
    "residual per-kernel gap inside a captured graph (ge_graph / npugraph_ex)",
    "ASSUMED",
)

KUNPENG = HostProfile(
    name="kunpeng",
    description="Kunpeng host of the CANNLab A3 image: 40 cores, 1 NUMA node",
    mem_bandwidth=Constant(
        142 * GB,
        "B/s",
        "CPU MoE kernel achieved 137-142 GB/s (ceiling ~155 GB/s), CRI dsv4 design doc (" + _REF + " Lab 7)",
        "V",
    ),
    flops=Constant(
        33 * 155 * GB,
        "FLOP/s",
        "machine ridge ~33 OP/B x ~155 GB/s copy ceiling, CRI dsv4 roofline (" + _REF + " Lab 7)",
        "DERIVED",
    ),
)


def _fp16(value: float, source: str, marker: str) -> dict[str, Constant]:
    return {
        "fp16": Constant(value, "FLOP/s", source, marker),
        "bf16": Constant(value, "FLOP/s", "same cube rate as fp16", "ASSUMED"),
        "fp32": Constant(value / 2, "FLOP/s", "half the fp16 cube rate", "ASSUMED"),
    }


_A2_FP16 = 353.8 * TFLOPS
_A2_PEAKS = {
    **_fp16(_A2_FP16, "24 AIC x 1.8 GHz x 16^3 MAC x 2; " + _SIM, "DERIVED"),
    "int8": Constant(2 * _A2_FP16, "FLOP/s", "Mmad fractal 16x32x16 for int8 = 2x fp16 (§0.5)", "DERIVED"),
    "int4": Constant(4 * _A2_FP16, "FLOP/s", "Mmad fractal 16x64x16 for int4 = 4x fp16 (§0.5)", "DERIVED"),
}

PROFILES: dict[str, DeviceProfile] = {}


def _register(p: DeviceProfile) -> DeviceProfile:
    PROFILES[p.name] = p
    for alias in p.aliases:
        PROFILES[alias] = p
    return p


_register(
    DeviceProfile(
        name="910B",
        description="Ascend 910B2 (Atlas A2), one card",
        hbm_capacity=Constant(64 * GiB, "B", "npu-smi 'HBM Capacity 65536 MB' (" + _REF + " §0.5)", "V"),
        hbm_bandwidth=Constant(1.6 * TB, "B/s", _SIM, "UNVERIFIED"),
        peak_flops=_A2_PEAKS,
        h2d_bandwidth=_PCIE,
        d2h_bandwidth=_PCIE,
        launch_overhead=_LAUNCH,
        graph_launch_overhead=_GRAPH_LAUNCH,
        host=KUNPENG,
        aliases=("A2", "910B2"),
    )
)
_register(
    DeviceProfile(
        name="A3",
        description="Atlas A3 (910C), one of the two dies of a card",
        hbm_capacity=Constant(
            64 * GiB, "B", "64 GB HBM per die, CRI Hy3 report / dsv4 doc (" + _REF + " §0.5)", "V"
        ),
        hbm_bandwidth=Constant(
            1.6 * TB, "B/s", "per die, public serving-simulator config (§0.5)", "UNVERIFIED"
        ),
        peak_flops={
            k: Constant(v.value, v.unit, v.source, "UNVERIFIED" if k == "fp16" else v.marker)
            for k, v in _A2_PEAKS.items()
        },
        h2d_bandwidth=_PCIE,
        d2h_bandwidth=_PCIE,
        launch_overhead=_LAUNCH,
        graph_launch_overhead=_GRAPH_LAUNCH,
        host=KUNPENG,
        aliases=("910C",),
    )
)

_950_FP16 = Constant(
    486.6 * TFLOPS, "FLOP/s", "simulator config 'David120' (mapping to 950 UNVERIFIED, §0.5)", "UNVERIFIED"
)
_950_SRC = "Huawei Connect 2025 keynote as reported (" + _REF + " §0.5)"


def _950_peaks() -> dict[str, Constant]:
    fp8 = Constant(1000 * TFLOPS, "FLOP/s", "FP8/MXFP8/HiF8 1 PFLOPS, " + _950_SRC, "V-secondary")
    return {
        "fp16": _950_FP16,
        "bf16": Constant(_950_FP16.value, "FLOP/s", "same as fp16", "ASSUMED"),
        "fp32": Constant(_950_FP16.value / 2, "FLOP/s", "half the fp16 rate", "ASSUMED"),
        "fp8": fp8,
        "mxfp8": fp8,
        "int8": Constant(1000 * TFLOPS, "FLOP/s", "taken equal to FP8", "ASSUMED"),
        "mxfp4": Constant(2000 * TFLOPS, "FLOP/s", "MXFP4 2 PFLOPS, " + _950_SRC, "V-secondary"),
    }


_register(
    DeviceProfile(
        name="950PR",
        description="Ascend 950PR (prefill/recommendation part, HiBL 1.0 HBM)",
        hbm_capacity=Constant(128 * GiB, "B", "128 GB HiBL 1.0, " + _950_SRC, "V-secondary"),
        hbm_bandwidth=Constant(1.6 * TB, "B/s", "1.6 TB/s, " + _950_SRC, "V-secondary"),
        peak_flops=_950_peaks(),
        h2d_bandwidth=_PCIE,
        d2h_bandwidth=_PCIE,
        launch_overhead=_LAUNCH,
        graph_launch_overhead=_GRAPH_LAUNCH,
        host=KUNPENG,
    )
)
_register(
    DeviceProfile(
        name="950DT",
        description="Ascend 950DT (decode/training part, HiZQ 2.0 HBM)",
        hbm_capacity=Constant(144 * GiB, "B", "144 GB HiZQ 2.0, " + _950_SRC, "V-secondary"),
        hbm_bandwidth=Constant(4 * TB, "B/s", "4 TB/s, " + _950_SRC, "V-secondary"),
        peak_flops=_950_peaks(),
        h2d_bandwidth=_PCIE,
        d2h_bandwidth=_PCIE,
        launch_overhead=_LAUNCH,
        graph_launch_overhead=_GRAPH_LAUNCH,
        host=KUNPENG,
    )
)

HOSTS: dict[str, HostProfile] = {"kunpeng": KUNPENG}


def get_profile(name: str) -> DeviceProfile:
    """Look a profile up by name or alias (case-insensitive); ``KeyError`` lists the names."""
    for key, profile in PROFILES.items():
        if key.lower() == name.lower():
            return profile
    raise KeyError(f"unknown emulation profile {name!r}; known: {', '.join(profile_names())}")


def profile_names() -> list[str]:
    """Canonical profile names (no aliases)."""
    return sorted({p.name for p in PROFILES.values()})


def _fmt_value(c: Constant) -> str:
    if c.unit == "B":
        return f"{c.value / GiB:g} GiB"
    if c.unit == "B/s":
        return f"{c.value / GB:g} GB/s"
    if c.unit == "FLOP/s":
        return f"{c.value / TFLOPS:g} TFLOP/s"
    if c.unit == "s":
        return f"{c.value / US:g} µs"
    return f"{c.value:g} {c.unit}"


def constants_table() -> str:
    """The Markdown table of every profile constant (docs/labkit.md embeds it verbatim).

    A constant shared by several profiles (same value, marker and source) is one row.
    """
    merged: dict[tuple[str, str, str, str], list[str]] = {}
    for name in ["910B", "A3", "950PR", "950DT"]:
        for key, c in PROFILES[name].constants().items():
            if not key.startswith("host_"):
                merged.setdefault((key, _fmt_value(c), c.marker, c.source), []).append(name)
    for host in HOSTS.values():
        for key, c in (("mem_bandwidth", host.mem_bandwidth), ("flops", host.flops)):
            merged.setdefault((key, _fmt_value(c), c.marker, c.source), []).append(f"host {host.name}")
    rows = ["| profile | constant | value | marker | source |", "|---|---|---|---|---|"]
    for (key, value, marker, source), names in merged.items():
        rows.append(f"| {', '.join(names)} | {key} | {value} | {marker} | {source} |")
    return "\n".join(rows)
