"""Every lab's headline figure beside its talk's: the table of docs/labs/README.md.

Each lab bench (``bench/<lab>.py``) exposes ``headline() -> Headline``: it computes the lab's
headline figure from the reference solution on the emulated device (nothing typed in but the
talk's figure) and says, when the two differ by more than 30 %, which effect of the real system
the toy leaves out (``gap``). This script imports every bench, calls ``headline()`` and prints the
Markdown table that ``docs/labs/README.md`` carries (``--write`` replaces it there).

    .venv/bin/python bench/headlines.py [--write] [--lab LAB ...]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "labs" / "README.md"
BEGIN, END = "<!-- headlines:begin (bench/headlines.py --write) -->", "<!-- headlines:end -->"
# lab -> its bench module (bench/<module>.py)
BENCHES = {
    "kv-offload": "kv_offload",
    "agent-deploy": "agent_deploy",
    "pypto-kda": "pypto_kda",
    "dspark-spec": "dspark",
    "longcat-parallel": "longcat",
    "sanavideo": "sanavideo",
    "dsv4-offload": "dsv4_offload",
}
TOLERANCE = 0.30


@dataclass(frozen=True)
class Headline:
    """One lab's headline figure: ``emulated`` and ``talk`` in the same ``unit``."""

    lab: str
    figure: str  # what is measured, e.g. "pooled offload throughput vs baseline"
    emulated: float
    talk: float
    unit: str  # e.g. "x", "%", "ms"
    source: str  # where the talk's figure comes from (shared/reference/talks-and-hardware.md)
    gap: str = ""  # required when outside the tolerance: the effect the toy leaves out

    @property
    def ratio(self) -> float:
        return self.emulated / self.talk if self.talk else float("inf")

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1.0) <= TOLERANCE

    def problems(self) -> list[str]:
        if not self.within and not self.gap.strip():
            return [
                f"{self.lab}: {self.emulated:g} {self.unit} is not within 30 % of the talk's "
                f"{self.talk:g} and no gap paragraph says why"
            ]
        return []


def collect(labs: list[str]) -> list[Headline]:
    sys.path.insert(0, str(ROOT / "bench"))
    out = []
    for lab in labs:
        module = importlib.import_module(BENCHES[lab])
        out.append(module.headline())
    return out


def table(rows: list[Headline]) -> str:
    lines = [
        "| lab | figure | emulated | talk | emulated/talk | what the toy leaves out |",
        "|---|---|---|---|---|---|",
    ]
    for h in rows:
        lines.append(
            f"| {h.lab} | {h.figure} | {h.emulated:.3g} {h.unit} | {h.talk:.3g} {h.unit} "
            f"({h.source}) | {h.ratio:.2f} | {h.gap or '—'} |"
        )
    return "\n".join(lines)


def write(text: str) -> None:
    doc = README.read_text(encoding="utf-8")
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", action="append", choices=sorted(BENCHES), help="only these labs")
    ap.add_argument("--write", action="store_true", help=f"replace the table in {README.relative_to(ROOT)}")
    args = ap.parse_args()
    rows = collect(args.lab or list(BENCHES))
    text = table(rows)
    print(text)
    problems = [p for h in rows for p in h.problems()]
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    if args.write:
        write(text)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
