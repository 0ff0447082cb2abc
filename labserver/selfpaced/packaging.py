"""``python -m labserver.selfpaced.packaging build [--out dist]`` (``make dist``): wheels that run with no
repository, no npm and no network — ``pip install labserver-*.whl labkit-*.whl`` then
``labserver selfpaced``.

The labserver wheel carries, under ``labserver/bundled/`` (which :mod:`labserver.config` prefers
when present):

- ``web/templates``, ``web/static`` and the files the pages load from ``web/node_modules``
  (:data:`VENDOR_FILES`: xterm, its fit addon, CodeMirror 5) — the same ``/vendor/...`` URLs work;
- ``labs/<lab-id>/`` for every lab folder with a ``lab.yaml`` (``labkit`` is its own wheel).

The build never touches the checkout: the sources are copied into a temporary folder, the bundle is
added there, and the wheels are built from that copy (``pip wheel --no-build-isolation``), so a
developer's editable install never sees a stale ``labserver/bundled``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # labserver/selfpaced/packaging.py

#: npm package -> the parts of it the pages use (served at /vendor/<name>/..., see app.VENDOR)
VENDOR_FILES = {
    "@xterm/xterm": ["lib", "css", "package.json", "LICENSE"],
    "@xterm/addon-fit": ["lib", "package.json", "LICENSE"],
    "codemirror": ["lib", "mode", "addon", "theme", "keymap", "package.json", "LICENSE"],
}
JUNK = shutil.ignore_patterns(
    "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", "*.egg-info", ".DS_Store"
)
#: files the labserver wheel must hold, or the build fails
REQUIRED = (
    "labserver/bundled/web/node_modules/@xterm/xterm/lib/xterm.js",
    "labserver/bundled/web/node_modules/@xterm/addon-fit/lib/addon-fit.js",
    "labserver/bundled/web/node_modules/codemirror/lib/codemirror.js",
    "labserver/bundled/labs/getting-started/lab.yaml",
    "labserver/migrations/env.py",
)


class BuildError(RuntimeError):
    pass


def bundle_web(web: Path, dest: Path) -> None:
    modules = web / "node_modules"
    if not modules.is_dir():
        raise BuildError(f"{modules} is missing: run `make web` (npm ci in web/) first")
    for name in ("templates", "static"):
        if (web / name).is_dir():
            shutil.copytree(web / name, dest / name, ignore=JUNK)
    for package, parts in VENDOR_FILES.items():
        src = modules / package
        if not src.is_dir():
            raise BuildError(f"npm package {package} is missing from {modules}: run `make web`")
        for part in parts:
            item = src / part
            target = dest / "node_modules" / package / part
            if item.is_dir():
                shutil.copytree(item, target, ignore=JUNK)
            elif item.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(item, target)


def bundle_labs(labs: Path, dest: Path) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    bundled = []
    for lab in sorted(labs.iterdir()):
        if lab.is_dir() and (lab / "lab.yaml").is_file() and lab.name != "labkit":
            shutil.copytree(lab, dest / lab.name, ignore=JUNK)
            bundled.append(lab.name)
    return bundled


def stage_sources(repo: Path, stage: Path) -> None:
    stage.mkdir(parents=True)
    shutil.copy2(repo / "pyproject.toml", stage / "pyproject.toml")
    for name in ("README.md", "LICENSE"):
        if (repo / name).is_file():
            shutil.copy2(repo / name, stage / name)
    shutil.copytree(
        repo / "labserver",
        stage / "labserver",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "bundled"),
    )


def _pip_wheel(source: Path, out: Path) -> Path:
    before = set(out.glob("*.whl"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(source),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"pip wheel {source.name} failed:\n{proc.stdout}\n{proc.stderr}")
    made = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob(f"{source.name.split('-')[0]}-*.whl"))
    if not made:
        raise BuildError(f"pip wheel {source.name} made no wheel")
    return made[-1]


def build(out: Path, repo: Path = REPO) -> list[Path]:
    """Build the labserver and labkit wheels into ``out``; returns their paths."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("labserver-*.whl")) + list(out.glob("labkit-*.whl")):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="labserver-dist-") as tmp:
        stage = Path(tmp) / "labserver"
        stage_sources(repo, stage)
        bundle_web(repo / "web", stage / "labserver" / "bundled" / "web")
        labs = bundle_labs(repo / "labs", stage / "labserver" / "bundled" / "labs")
        if not labs:
            raise BuildError(f"no labs found in {repo / 'labs'}")
        wheel = _pip_wheel(stage, out)
        names = set(zipfile.ZipFile(wheel).namelist())
        missing = [name for name in REQUIRED if name not in names]
        if missing:
            raise BuildError(
                f"{wheel.name} lacks {', '.join(missing)}: check [tool.setuptools.package-data] in pyproject.toml"
            )
        labkit_stage = Path(tmp) / "labkit"
        shutil.copytree(repo / "labs" / "labkit", labkit_stage, ignore=JUNK)
        shutil.rmtree(labkit_stage / "build", ignore_errors=True)
        labkit = _pip_wheel(labkit_stage, out)
    return [wheel, labkit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labserver.selfpaced.packaging")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the labserver and labkit wheels")
    b.add_argument("--out", type=Path, default=REPO / "dist")
    args = parser.parse_args(argv)
    try:
        wheels = build(args.out)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for wheel in wheels:
        print(f"{wheel}  ({wheel.stat().st_size / 1e6:.1f} MB)")
    print("install on a laptop:  pip install " + " ".join(w.name for w in wheels) + " torch==2.13.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
