"""The architecture stays true: read every module's imports (``ast``, nothing is imported) and fail
on an import circle, on an arrow that runs back up the layers, on ``content/`` reaching into
infrastructure, on labkit importing labserver or a private helper of a sibling package; and on a
module or package that ``docs/architecture.md`` / its README does not describe.

The layers, lowest first, are the ones ``docs/architecture.md`` draws ("Layers"). A module may
import from its own layer and the layers below it, never from a layer above."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "labserver"
LABKIT = REPO / "labs" / "labkit" / "labkit"
ARCHITECTURE = REPO / "docs" / "architecture.md"

#: lowest first; a module belongs to the layer of the longest prefix listed
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "labserver",
            "labserver.clock",
            "labserver.config",
            "labserver.i18n",
            "labserver.models",
            "labserver.db",
            "labserver.observability",
            "labserver.migrations",
            "labserver.edge",
        ),
    ),
    ("content", ("labserver.content",)),
    ("backends", ("labserver.backends",)),
    ("checks", ("labserver.checks",)),
    (
        "shared",
        (
            "labserver.live",
            "labserver.terminals",
            "labserver.schemas",
        ),
    ),
    ("services", ("labserver.services",)),
    ("routes", ("labserver.routes",)),
    ("app", ("labserver.app",)),
    ("selfpaced", ("labserver.selfpaced",)),
    ("cli", ("labserver.cli",)),
]
MAX_LINES = 800
#: the areas of ``labserver/services/``, lowest first: an area imports from itself and the areas
#: before it (and from the shared modules at the top of ``services/``), never from one after it
SERVICE_AREAS = [
    "provisioning",
    "support",
    "dashboard",
    "grading",
    "joining",
    "reporting",
    "operations",
    "staff",
]
#: what may stay loose at the top of ``labserver/`` (what every layer uses), and the largest folder
MAX_LOOSE_MODULES = 8
MAX_MODULES_PER_FOLDER = 15


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {
        module_name(p, root): p
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts and "versions" not in p.relative_to(root).parts
    }


def imports(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """Every module of ``known`` that ``path`` (module ``name``) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _resolve(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    yield full  # `from package import module`
                else:
                    yield from _resolve(base, known)


def _resolve(dotted: str, known: set[str]) -> Iterator[str]:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in known:
            yield candidate
            return


def graph(root: Path) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {name: set(imports(path, name, known)) - {name} for name, path in mods.items()}


def layer_of(name: str) -> int:
    best, best_len = -1, -1
    for index, (_label, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best >= 0, f"{name} is in no layer: add it to LAYERS here and in docs/architecture.md"
    return best


def area_of(name: str) -> str:
    """The package (or top-level module) a module belongs to: ``labserver.backends.docker.engines``
    -> ``labserver.backends``."""
    return ".".join(name.split(".")[:2])


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_modules() -> None:
    assert cycles(graph(PACKAGE)) == []


def test_no_import_circle_between_packages() -> None:
    areas: dict[str, set[str]] = {}
    for name, targets in graph(PACKAGE).items():
        areas.setdefault(area_of(name), set()).update(
            area_of(t) for t in targets if area_of(t) != area_of(name)
        )
    assert cycles(areas) == []


def test_no_import_runs_back_up_the_layers() -> None:
    wrong = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in sorted(graph(PACKAGE).items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(name)
    ]
    assert not wrong, "imports that run back up:\n" + "\n".join(wrong)


def service_area(name: str) -> str | None:
    """``labserver.services.grading.checking`` -> ``grading``; None for the shared modules of services/."""
    parts = name.split(".")
    return parts[2] if parts[:2] == ["labserver", "services"] and len(parts) > 3 else None


def test_every_service_lives_in_a_named_area_and_areas_import_only_lower_ones() -> None:
    folders = sorted(p.name for p in (PACKAGE / "services").iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(SERVICE_AREAS), (
        "name each services/ area in SERVICE_AREAS and docs/architecture.md"
    )
    wrong = [
        f"{name} ({area}) imports {target} ({other})"
        for name, targets in sorted(graph(PACKAGE).items())
        if (area := service_area(name))
        for target in sorted(targets)
        if (other := service_area(target)) and SERVICE_AREAS.index(other) > SERVICE_AREAS.index(area)
    ]
    assert not wrong, "services areas that import a higher area:\n" + "\n".join(wrong)


def test_the_layout_shows_the_areas() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, f"group these top-level modules into area packages: {loose}"
    crowded = {
        str(folder.relative_to(REPO)): n
        for folder in sorted({p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts})
        if "versions" not in folder.parts
        and (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES_PER_FOLDER
    }
    assert not crowded, f"split these folders by area (at most {MAX_MODULES_PER_FOLDER} modules): {crowded}"


def test_the_lab_format_knows_no_infrastructure() -> None:
    forbidden = ("labserver.backends", "labserver.checks", "labserver.services", "labserver.routes")
    wrong = [
        f"{name} imports {target}"
        for name, targets in graph(PACKAGE).items()
        if name.startswith("labserver.content")
        for target in targets
        if target.startswith(forbidden)
    ]
    assert not wrong


def test_labkit_never_imports_labserver_nor_a_private_helper_of_a_sibling() -> None:
    problems = []
    for path in sorted(LABKIT.rglob("*.py")):
        name = module_name(path, LABKIT)
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith(("labkit", "labserver"))
            ):
                problems.append(f"{name}: hidden import of {node.args[0].value} (importlib)")
            for target in targets:
                if target == "labserver" or target.startswith("labserver."):
                    problems.append(f"{name} imports {target}")
                parts = target.split(".")
                private = next((i for i, p in enumerate(parts) if p.startswith("_") and i > 0), None)
                if parts[0] == "labkit" and private is not None:
                    owner = ".".join(parts[:private])
                    if owner != own and not own.startswith(owner + "."):
                        problems.append(f"{name} imports {target}, a private helper of {owner}")
    assert not problems, "\n".join(problems)


def test_modules_stay_small() -> None:
    big = {
        str(path.relative_to(REPO)): n
        for path in modules(PACKAGE).values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"split these by idea (STYLE: modules stay under ~{MAX_LINES} lines): {big}"


# -- documentation ----------------------------------------------------------------------------------
def test_architecture_names_every_module_and_layer() -> None:
    text = ARCHITECTURE.read_text()
    missing = [
        rel
        for path in sorted(modules(PACKAGE).values())
        if path.name != "__init__.py"
        and (rel := path.relative_to(PACKAGE).as_posix()) not in text
        and f"`{path.name}`" not in _package_table(text, path.parent.relative_to(PACKAGE).as_posix())
    ]
    assert not missing, f"docs/architecture.md does not name: {missing}"
    layers = _section(text, "Layers")
    for label, _prefixes in LAYERS:
        assert f"**{label}**" in layers, f"layer {label} is not in docs/architecture.md, section Layers"
    for area in SERVICE_AREAS:
        assert f"`services/{area}/`" in layers, (
            f"services area {area} is not in docs/architecture.md, section Layers"
        )


def test_every_package_folder_has_a_readme() -> None:
    folders = sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)
    missing = [str(f.relative_to(REPO)) for f in folders if not (f / "README.md").is_file()]
    assert not missing, f"add a README.md (purpose, key types, pitfalls) to: {missing}"


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/architecture.md has no section '## {title}'"
    return match.group(1)


def _package_table(text: str, folder: str) -> str:
    """The module table of one package in the architecture page (``### backends/docker/``)."""
    match = re.search(rf"^### `?{re.escape(folder)}/`?\n(.*?)(?=^##|\Z)", text, re.S | re.M)
    return match.group(1) if match else ""
