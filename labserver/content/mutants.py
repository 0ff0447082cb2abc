"""Wrong solutions that are part of a lab (DESIGN: the lab format).

``labs/<lab>/mutants/<step-id>/<name>/`` holds a typical mistake for one step: files laid over the
solution (paths relative to the lab folder, as in ``solution/``), optionally ``mutant.patch`` (a
unified diff applied with ``patch -p1`` in the lab folder after the overlay) and ``mutant.yaml``::

    what: {en: "eps added after the square root", zh: "eps 加在了开方之后"}
    class: parameter          # one of MISTAKE_CLASSES (docs/writing-labs.md)
    expect: {en: "eps", zh: "eps"}   # optional: a phrase the failure message must contain
                              # (a plain string is English only)
    delete: [notes/hello.txt] # optional: solution files the mistake leaves out

``labserver selftest`` applies each mutant to the solved lab and requires its step to *fail* (not
error, not pass) with a message."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labserver.content.schema import I18n

MUTANT_FILE = "mutant.yaml"
EQUIVALENT_FILE = "equivalent.yaml"  # machine-made mutants that leave the program right (labserver mutate)
PATCH_FILE = "mutant.patch"
MIN_MUTANTS_PER_STEP = 3

# The catalogue of mistake classes in docs/writing-labs.md ("Mutants"): a step covers the classes
# that apply to it, not only the examples its author first thought of.
MistakeClass = Literal[
    "ordering",  # a synchronisation or an order the step teaches is left out
    "one-input",  # works only for the default prompt, seed or shape
    "parameter",  # a parameter or dtype the step asks for is ignored or wrong
    "reference",  # delegates to the checker's own reference where the step asks to write it
    "state",  # fixes the tree by hand instead of making the script work
    "numbers",  # a reported figure copied, made up or computed where a clamp never binds
    "boundary",  # > vs >=, off by one, rounding mode at a stated threshold
    "missing",  # a file, output or piece of the step is not there
    "logic",  # the computation itself is wrong
]


class MutantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    what: I18n
    mistake_class: MistakeClass = Field(alias="class")
    expect: I18n | None = None
    delete: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Mutant:
    step: str
    name: str
    path: Path
    spec: MutantSpec

    @property
    def key(self) -> str:
        return f"{self.step}/{self.name}"

    @property
    def patch(self) -> Path | None:
        p = self.path / PATCH_FILE
        return p if p.is_file() else None

    def overlay_files(self) -> list[Path]:
        """The files laid over the solution (everything but ``mutant.yaml`` and the patch)."""
        return sorted(
            p
            for p in self.path.rglob("*")
            if p.is_file()
            and p.relative_to(self.path).as_posix() not in (MUTANT_FILE, PATCH_FILE)
            and "__pycache__" not in p.parts
        )


@dataclass(frozen=True)
class MutantProblem:
    file: str
    field: str
    message: str


def _safe_relative(name: str) -> bool:
    p = Path(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts


def load_mutants(lab_path: Path, step_ids: list[str]) -> tuple[tuple[Mutant, ...], list[MutantProblem]]:
    """Every mutant under ``lab_path/mutants``, in step order then name, and what is wrong with the
    folder (an unknown step, a missing or malformed ``mutant.yaml``, an empty mutant)."""
    root = lab_path / "mutants"
    mutants: list[Mutant] = []
    problems: list[MutantProblem] = []
    if not root.is_dir():
        return (), problems
    order = {s: i for i, s in enumerate(step_ids)}
    for step_dir in sorted(root.iterdir(), key=lambda p: (order.get(p.name, len(order)), p.name)):
        rel_step = f"{lab_path.name}/mutants/{step_dir.name}"
        if not step_dir.is_dir():
            continue
        if step_dir.name not in order:
            problems.append(MutantProblem(rel_step, "", f"no step {step_dir.name!r} in lab.yaml"))
            continue
        for mdir in sorted(p for p in step_dir.iterdir() if p.is_dir()):
            rel = f"{rel_step}/{mdir.name}/{MUTANT_FILE}"
            try:
                raw = yaml.safe_load((mdir / MUTANT_FILE).read_text(encoding="utf-8"))
                spec = MutantSpec.model_validate(raw)
            except FileNotFoundError:
                problems.append(MutantProblem(rel, "", "mutant.yaml is missing (what the mistake is)"))
                continue
            except yaml.YAMLError as exc:
                problems.append(MutantProblem(rel, "", f"not valid YAML: {exc}"))
                continue
            except ValidationError as exc:
                for err in exc.errors():
                    where = ".".join(str(x) for x in err["loc"])
                    problems.append(MutantProblem(rel, where, err["msg"]))
                continue
            mutant = Mutant(step_dir.name, mdir.name, mdir, spec)
            if bad := [d for d in spec.delete if not _safe_relative(d)]:
                problems.append(MutantProblem(rel, "delete", f"paths must stay in the lab folder: {bad}"))
                continue
            if not mutant.overlay_files() and mutant.patch is None and not spec.delete:
                problems.append(
                    MutantProblem(rel, "", "the mutant changes nothing (no files, no patch, no delete)")
                )
                continue
            mutants.append(mutant)
    return tuple(mutants), problems


class Equivalent(BaseModel):
    """A machine-made mutant (``labserver mutate``) that is still a right program, and why."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(pattern=r"^[0-9a-f]{10}$")  # Mutation.key
    mutant: str = ""  # its one-line summary, for the reader
    reason: str = Field(min_length=10)


def load_equivalents(lab_path: Path) -> tuple[dict[str, Equivalent], list[MutantProblem]]:
    """``mutants/equivalent.yaml`` (a list of :class:`Equivalent`) by key, and what is wrong with it."""
    path = lab_path / "mutants" / EQUIVALENT_FILE
    rel = f"{lab_path.name}/mutants/{EQUIVALENT_FILE}"
    if not path.is_file():
        return {}, []
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError as exc:
        return {}, [MutantProblem(rel, "", f"not valid YAML: {exc}")]
    if not isinstance(raw, list):
        return {}, [MutantProblem(rel, "", "must be a list of {key, mutant, reason}")]
    out: dict[str, Equivalent] = {}
    problems: list[MutantProblem] = []
    for i, item in enumerate(raw):
        try:
            entry = Equivalent.model_validate(item)
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(x) for x in (i, *err["loc"]))
                problems.append(MutantProblem(rel, where, err["msg"]))
            continue
        out[entry.key] = entry
    return out, problems
