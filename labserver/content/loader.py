"""Loading labs from ``LABS_DIR``. A lab that does not load becomes a :class:`BrokenLab`, shown
as unavailable, so one broken folder never stops the server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from labserver.content.costs import COSTS_FILE, load_costs
from labserver.content.mutants import Mutant, load_equivalents, load_mutants
from labserver.content.schema import LabSpec, StepSpec

NOT_LABS = {"labkit", "__pycache__", "node_modules"}


@dataclass(frozen=True)
class Problem:
    level: str  # "error" | "warning"
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}" + (f": {self.field}" if self.field else "")
        return f"{self.level}: {where}: {self.message}"


@dataclass(frozen=True)
class Step:
    index: int  # 0-based
    spec: StepSpec
    markdown: Path
    markdown_zh: Path | None
    checker: Path

    @property
    def id(self) -> str:
        return self.spec.id

    def instructions(self, lang: str) -> str:
        path = self.markdown_zh if lang == "zh" and self.markdown_zh else self.markdown
        return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Lab:
    spec: LabSpec
    path: Path
    steps: tuple[Step, ...]
    mutants: tuple[Mutant, ...] = ()
    #: step id -> CPU seconds of its check on the reference (``checks/costs.yaml``; content/costs.py)
    costs: Mapping[str, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def starter(self) -> Path:
        return self.path / "starter"

    @property
    def solution(self) -> Path:
        return self.path / "solution"

    def step(self, step_id: str) -> Step | None:
        return next((s for s in self.steps if s.id == step_id), None)

    def mutants_of(self, step_id: str) -> tuple[Mutant, ...]:
        return tuple(m for m in self.mutants if m.step == step_id)


@dataclass(frozen=True)
class BrokenLab:
    id: str
    path: Path
    problems: tuple[Problem, ...] = field(default_factory=tuple)


def _field_path(loc: tuple[int | str, ...], spec: dict | None) -> str:
    """``('steps', 2, 'timeout_s')`` -> ``steps[2] (step 'write-file').timeout_s``."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int) and parts:
            parts[-1] += f"[{item}]"
            if parts[-1].startswith("steps[") and len(parts) == 1 and spec:
                steps = spec.get("steps") or []
                if item < len(steps) and isinstance(steps[item], dict) and steps[item].get("id"):
                    parts[-1] += f" (step {steps[item]['id']!r})"
        else:
            parts.append(str(item))
    return ".".join(parts)


def parse_lab_yaml(path: Path) -> tuple[LabSpec | None, list[Problem]]:
    rel = f"{path.parent.name}/lab.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, [Problem("error", rel, "", "lab.yaml is missing")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return None, [Problem("error", rel, where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]
    if not isinstance(raw, dict):
        return None, [
            Problem("error", rel, "", "lab.yaml must be a mapping of fields (id, title, steps, ...)")
        ]
    try:
        return LabSpec.model_validate(raw), []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (typo?)"
            problems.append(Problem("error", rel, _field_path(err["loc"], raw), msg))
        return None, problems


def load_lab(path: Path) -> Lab | BrokenLab:
    spec, problems = parse_lab_yaml(path / "lab.yaml")
    if spec is None:
        return BrokenLab(path.name, path, tuple(problems))
    rel = f"{path.name}/lab.yaml"
    if spec.id != path.name:
        problems.append(
            Problem("error", rel, "id", f"id {spec.id!r} must equal the folder name {path.name!r}")
        )
    steps = []
    for i, s in enumerate(spec.steps):
        md = path / s.file
        zh = md.with_name(md.stem + ".zh.md") if md.suffix == ".md" else None
        chk = path / s.check
        where = f"steps[{i}] (step {s.id!r})"
        for label, p in (("file", md), ("check", chk)):
            if not p.resolve().is_relative_to(path.resolve()):
                problems.append(Problem("error", rel, f"{where}.{label}", "must stay inside the lab folder"))
            elif not p.is_file():
                problems.append(
                    Problem("error", rel, f"{where}.{label}", f"{p.relative_to(path)} does not exist")
                )
        steps.append(Step(i, s, md, zh if zh and zh.is_file() else None, chk))
    if not (path / "starter").is_dir():
        problems.append(Problem("error", f"{path.name}/starter", "", "the starter/ folder is missing"))
    mutants, mutant_problems = load_mutants(path, [s.id for s in spec.steps])
    problems += [Problem("error", m.file, m.field, m.message) for m in mutant_problems]
    _equivalents, equivalent_problems = load_equivalents(path)
    problems += [Problem("error", m.file, m.field, m.message) for m in equivalent_problems]
    costs, cost_problems = load_costs(path, [s.id for s in spec.steps])
    problems += [Problem("error", f"{path.name}/{COSTS_FILE}", f, m) for f, m in cost_problems]
    if any(p.level == "error" for p in problems):
        return BrokenLab(path.name, path, tuple(problems))
    return Lab(spec, path, tuple(steps), mutants, costs)


class LabCatalog:
    """All labs under a folder, in their ``order`` then id; or, with ``folders``, exactly those lab
    folders (``labserver serve --dev LAB_DIR...``). ``reload()`` re-reads them all, ``put()``
    replaces one lab (the dev watcher, content/lab_watch.py)."""

    def __init__(self, root: Path, folders: Sequence[Path] | None = None) -> None:
        self.root = root
        self.folders = list(folders) if folders is not None else None
        self.labs: dict[str, Lab] = {}
        self.broken: dict[str, BrokenLab] = {}
        self.reload()

    def lab_folders(self) -> list[Path]:
        if self.folders is not None:
            return list(self.folders)
        if not self.root.is_dir():
            return []
        return [
            child
            for child in sorted(self.root.iterdir())
            if child.is_dir()
            and child.name not in NOT_LABS
            and not child.name.startswith((".", "_"))
            and (child / "lab.yaml").exists()
        ]

    def reload(self) -> None:
        labs: dict[str, Lab] = {}
        broken: dict[str, BrokenLab] = {}
        for child in self.lab_folders():
            loaded = load_lab(child)
            if isinstance(loaded, Lab):
                labs[loaded.id] = loaded
            else:
                broken[loaded.id] = loaded
        self.labs = _ordered(labs)
        self.broken = broken

    def put(self, loaded: Lab | BrokenLab) -> None:
        """Replace the lab of ``loaded``'s id with it (a working lab, or a broken one with its
        problems). The dicts are replaced, never changed in place: a request reading the catalog
        sees the labs before or after, never half of it."""
        labs = {k: v for k, v in self.labs.items() if k != loaded.id}
        broken = {k: v for k, v in self.broken.items() if k != loaded.id}
        if isinstance(loaded, Lab):
            labs[loaded.id] = loaded
        else:
            broken[loaded.id] = loaded
        self.labs, self.broken = _ordered(labs), broken

    def get(self, lab_id: str) -> Lab | None:
        return self.labs.get(lab_id)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.labs.values())


def _ordered(labs: dict[str, Lab]) -> dict[str, Lab]:
    return dict(sorted(labs.items(), key=lambda kv: (kv[1].spec.order, kv[0])))
