"""Building the lab images with no container registry.

``build_cpu_emu()`` does, in order, reporting each phase to a ``progress(phase, message)`` callback:

1. ``base``: make the Debian base image with ``provisioning/images/make-base-image.sh`` when it is
   absent (mmdebstrap/debootstrap from the machine's apt mirror, then ``docker import``);
2. ``hash``: hash the Dockerfile, the requirements, labkit's sources and the base image id; when the
   image ``labserver/cpu-emu:<hash>`` exists, only the stable tag is (re)pointed and nothing is built;
3. ``wheels``: ``pip download`` the requirements into a wheelhouse cached by the requirements' hash;
4. ``labkit``: build labkit's wheel from ``labs/labkit``;
5. ``build``: ``docker build --network none`` with Debian's client (BuildKit when available).

Wheelhouse and build context live in a cache folder outside git (``$LABSERVER_DATA_DIR/cache`` or
the user's cache directory). Images reach other engines with :func:`copy_image` (save | load).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import platformdirs

REPO_ROOT = Path(__file__).resolve().parents[3]  # labserver/backends/docker/images.py
IMAGES_DIR = REPO_ROOT / "provisioning" / "images"
LABKIT_DIR = REPO_ROOT / "labs" / "labkit"


def _base_tag(images_dir: Path) -> str:
    """``labserver/base:bookworm-<hash of its package list>``: a changed list makes a new base."""
    path = images_dir / "make-base-image.sh"
    if not path.is_file():  # an installed wheel carries no provisioning/ folder
        return "labserver/base:bookworm"
    script = path.read_text()
    found = re.search(r'^PACKAGES="([^"]*)"', script, re.M)
    digest = hashlib.sha256((found.group(1) if found else script).encode()).hexdigest()[:10]
    return f"labserver/base:bookworm-{digest}"


BASE_IMAGE = _base_tag(IMAGES_DIR)

CPU_EMU_REPO = "labserver/cpu-emu"
STABLE_TAG = "latest"
HASH_LABEL = "labserver.content-hash"

Progress = Callable[[str, str], None]


class ImageBuildError(RuntimeError):
    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class BuildResult:
    tag: str  # labserver/cpu-emu:<hash>
    stable_tag: str  # labserver/cpu-emu:latest
    content_hash: str
    built: bool  # False when the tagged image already existed
    seconds: float
    phases: dict[str, float]


def docker_cli() -> str:
    """Debian's client: a newer ``docker`` earlier on PATH may lack the BuildKit builder."""
    explicit = os.environ.get("LABSERVER_DOCKER_CLI")
    if explicit:
        return explicit
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")


def default_cache_dir() -> Path:
    data_dir = os.environ.get("LABSERVER_DATA_DIR")
    if data_dir:
        return Path(data_dir) / "cache"
    return Path(platformdirs.user_cache_dir("labserver"))


def _quiet(phase: str, message: str) -> None:
    pass


def _docker(args: list[str], host: str | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    cmd = [docker_cli()] + (["-H", host] if host else []) + args
    return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def image_exists(tag: str, host: str | None = None) -> bool:
    return _docker(["image", "inspect", tag], host).returncode == 0


def image_id(tag: str, host: str | None = None) -> str:
    out = _docker(["image", "inspect", "--format", "{{.Id}}", tag], host)
    if out.returncode != 0:
        raise ImageBuildError(f"image {tag} not found", out.stderr)
    return out.stdout.strip()


def _stream(cmd: list[str], phase: str, progress: Progress, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``, passing each output line to ``progress``; returns the output, raises on failure."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        lines.append(line)
        if line:
            progress(phase, line)
    code = proc.wait()
    log = "\n".join(lines[-200:])
    if code != 0:
        raise ImageBuildError(f"{phase} failed (exit {code}): {' '.join(cmd[:3])} ...", log)
    return log


def _files(root: Path) -> Iterable[Path]:
    skip_dirs = {"__pycache__", ".pytest_cache", ".mypy_cache", "build", "dist", ".ruff_cache"}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(p in skip_dirs or p.endswith(".egg-info") for p in rel.parts):
            continue
        if path.is_file() and path.suffix not in (".pyc", ".pyo"):
            yield path


def hash_inputs(paths: Iterable[tuple[str, Path]], extra: Iterable[str] = ()) -> str:
    """sha256 over (name, content) of each file (folders walked in sorted order) and extra strings."""
    h = hashlib.sha256()
    for name, path in paths:
        files = [path] if path.is_file() else list(_files(path))
        for f in files:
            rel = name if f == path else f"{name}/{f.relative_to(path).as_posix()}"
            h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()


def ensure_base_image(
    tag: str = BASE_IMAGE, progress: Progress = _quiet, images_dir: Path = IMAGES_DIR
) -> bool:
    """Make the base image when absent; returns True when it was built."""
    if image_exists(tag):
        progress("base", f"base image {tag} present")
        return False
    progress("base", f"building base image {tag} from Debian packages")
    env = dict(os.environ, DOCKER=docker_cli())
    _stream(["bash", str(images_dir / "make-base-image.sh"), tag], "base", progress, env)
    if not image_exists(tag):
        raise ImageBuildError(f"base image {tag} missing after the build")
    return True


def ensure_wheelhouse(requirements: Path, cache_dir: Path, progress: Progress = _quiet) -> Path:
    """``pip download`` the requirements into a folder named by their hash (reused when complete)."""
    digest = hash_inputs([("requirements", requirements)], [sys.version.split()[0]])[:16]
    wheels = cache_dir / "wheelhouse" / digest
    if (wheels / ".complete").exists():
        progress("wheels", f"wheelhouse {wheels} reused")
        return wheels
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--progress-bar",
        "off",
        "-d",
        str(wheels),
        "-r",
        str(requirements),
    ]
    _stream(cmd, "wheels", progress)
    (wheels / ".complete").write_text("")
    return wheels


def build_labkit_wheel(dest: Path, progress: Progress = _quiet, labkit_dir: Path = LABKIT_DIR) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    # Build from a clean copy so an editable install's egg-info/build folders never leak in.
    src = dest.parent / "labkit-src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(
        labkit_dir,
        src,
        ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".pytest_cache", "tests"
        ),
    )
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--progress-bar",
        "off",
        "-w",
        str(dest),
        str(src),
    ]
    _stream(cmd, "labkit", progress)
    shutil.rmtree(src, ignore_errors=True)
    wheels = sorted(dest.glob("labkit-*.whl"))
    if len(wheels) != 1:
        raise ImageBuildError(f"expected one labkit wheel in {dest}, found {len(wheels)}")
    return wheels[0]


def _link_tree(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("."):
            target = dst / f.name
            try:
                os.link(f, target)
            except OSError:
                shutil.copy2(f, target)


def cpu_emu_hash(
    base_tag: str = BASE_IMAGE, images_dir: Path = IMAGES_DIR, labkit_dir: Path = LABKIT_DIR
) -> str:
    return hash_inputs(
        [
            ("Dockerfile", images_dir / "Dockerfile.cpu-emu"),
            ("requirements", images_dir / "requirements-cpu-emu.txt"),
            ("labkit", labkit_dir),
        ],
        [image_id(base_tag)],
    )[:12]


def assemble_context(
    dest: Path,
    *,
    progress: Progress = _quiet,
    cache_dir: Path | None = None,
    images_dir: Path = IMAGES_DIR,
    labkit_dir: Path = LABKIT_DIR,
) -> Path:
    """Write a lab-image build context to ``dest`` (wheels/, labkit/, the Dockerfiles and the
    requirements) without building: for ``Dockerfile.npu`` on an NPU node (add wheels-npu/ there)."""
    wheels = ensure_wheelhouse(
        images_dir / "requirements-cpu-emu.txt", cache_dir or default_cache_dir(), progress
    )
    dest.mkdir(parents=True, exist_ok=True)
    build_labkit_wheel(dest / "labkit", progress, labkit_dir)
    _link_tree(wheels, dest / "wheels")
    (dest / "wheels-npu").mkdir(exist_ok=True)
    for name in ("Dockerfile.cpu-emu", "Dockerfile.npu", "requirements-cpu-emu.txt"):
        shutil.copy2(images_dir / name, dest / name)
    return dest


def build_cpu_emu(
    *,
    progress: Progress = _quiet,
    cache_dir: Path | None = None,
    base_image: str = BASE_IMAGE,
    force: bool = False,
    images_dir: Path = IMAGES_DIR,
    labkit_dir: Path = LABKIT_DIR,
) -> BuildResult:
    """Build ``labserver/cpu-emu:<hash>`` (and ``:latest``) unless it exists. Idempotent."""
    t0 = time.monotonic()
    phases: dict[str, float] = {}

    def mark(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = round(now - since, 2)
        return now

    cache = cache_dir or default_cache_dir()
    t = time.monotonic()
    if base_image == BASE_IMAGE:
        ensure_base_image(base_image, progress, images_dir)
    elif not image_exists(base_image):
        raise ImageBuildError(f"base image {base_image} is not present on this engine")
    t = mark("base", t)

    digest = cpu_emu_hash(base_image, images_dir, labkit_dir)
    tag, stable = f"{CPU_EMU_REPO}:{digest}", f"{CPU_EMU_REPO}:{STABLE_TAG}"
    t = mark("hash", t)
    if image_exists(tag) and not force:
        _docker(["tag", tag, stable])
        progress("done", f"{tag} present, nothing to build")
        return BuildResult(tag, stable, digest, False, round(time.monotonic() - t0, 2), phases)

    wheels = ensure_wheelhouse(images_dir / "requirements-cpu-emu.txt", cache, progress)
    t = mark("wheels", t)
    context = cache / "build" / f"cpu-emu-{digest}-{os.getpid()}"  # concurrent builds never share
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    build_labkit_wheel(context / "labkit", progress, labkit_dir)
    t = mark("labkit", t)
    _link_tree(wheels, context / "wheels")
    for name in ("Dockerfile.cpu-emu", "requirements-cpu-emu.txt"):
        shutil.copy2(images_dir / name, context / name)

    progress("build", f"building {tag}")
    _docker_build(tag, stable, context / "Dockerfile.cpu-emu", context, base_image, digest, progress)
    mark("build", t)
    # the legacy builder leaves the deps stage as a dangling image
    if os.environ.get("DOCKER_BUILDKIT", "1") != "1":
        _docker(["image", "prune", "-f", "--filter", "dangling=true"])
    shutil.rmtree(context, ignore_errors=True)
    progress("done", f"built {tag}")
    return BuildResult(tag, stable, digest, True, round(time.monotonic() - t0, 2), phases)


def prune_old_tags(repo: str, keep: str) -> list[str]:
    """Untag content-hash tags of ``repo`` other than ``keep`` and ``latest`` that no container
    (running or not) was created from. Never automatic: a running server or test session may
    still create containers from an older tag (``labserver images prune``)."""
    out = _docker(["image", "ls", repo, "--format", "{{.Tag}}"])
    used = set(_docker(["ps", "-a", "--format", "{{.Image}}"]).stdout.split())
    removed = []
    for tag in out.stdout.split():
        name = f"{repo}:{tag}"
        if tag in (keep, STABLE_TAG, "<none>") or name in used:
            continue
        if _docker(["rmi", name]).returncode == 0:
            removed.append(tag)
    return removed


def copy_image(tag: str, dest_host: str, progress: Progress = _quiet, src_host: str | None = None) -> bool:
    """Copy an image to another engine with ``docker save | docker load`` (no registry).
    Returns False when the destination already has the same image id."""
    if image_exists(tag, dest_host) and image_id(tag, dest_host) == image_id(tag, src_host):
        return False
    progress("copy", f"copying {tag} to {dest_host}")
    cli = docker_cli()
    save = subprocess.Popen(
        [cli] + (["-H", src_host] if src_host else []) + ["save", tag], stdout=subprocess.PIPE
    )
    load = subprocess.run([cli, "-H", dest_host, "load"], stdin=save.stdout, capture_output=True, text=True)
    assert save.stdout is not None
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        raise ImageBuildError(f"could not copy {tag} to {dest_host}", load.stderr)
    return True


# -- the service images for docker-compose.yml ---------------------------------------------------
SERVER_REPO = "labserver/server"
POSTGRES_REPO = "labserver/postgres"
POSTGRES_BASE = "labserver/postgres-base:bookworm"
WEB_DIR = REPO_ROOT / "web"
LABS_DIR = REPO_ROOT / "labs"


def _runtime_requirements() -> list[str]:
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def _docker_build(
    tag: str, stable: str, dockerfile: Path, context: Path, base_image: str, digest: str, progress: Progress
) -> None:
    buildkit = os.environ.get("DOCKER_BUILDKIT", "1")
    cmd = [
        docker_cli(),
        "build",
        "--network",
        "none",
        "-f",
        str(dockerfile),
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "--label",
        f"{HASH_LABEL}={digest}",
        "-t",
        tag,
        "-t",
        stable,
    ]
    if buildkit == "1":
        cmd += ["--progress", "plain"]
    _stream([*cmd, str(context)], "build", progress, dict(os.environ, DOCKER_BUILDKIT=buildkit))


def build_server(
    *,
    progress: Progress = _quiet,
    cache_dir: Path | None = None,
    base_image: str = BASE_IMAGE,
    force: bool = False,
) -> BuildResult:
    """``labserver/server:<hash>`` (+ ``:latest``): the web service with labs/ and web/, offline."""
    t0 = time.monotonic()
    ensure_base_image(base_image, progress)
    web_inputs = [
        (n, WEB_DIR / n) for n in ("templates", "static", "package-lock.json") if (WEB_DIR / n).exists()
    ]
    digest = hash_inputs(
        [
            ("Dockerfile", IMAGES_DIR / "Dockerfile.server"),
            ("pyproject", REPO_ROOT / "pyproject.toml"),
            ("labserver", REPO_ROOT / "labserver"),
            ("labs", LABS_DIR),
            *web_inputs,
        ],
        [image_id(base_image)],
    )[:12]
    tag, stable = f"{SERVER_REPO}:{digest}", f"{SERVER_REPO}:{STABLE_TAG}"
    if image_exists(tag) and not force:
        _docker(["tag", tag, stable])
        return BuildResult(tag, stable, digest, False, round(time.monotonic() - t0, 2), {})
    cache = cache_dir or default_cache_dir()
    context = cache / "build" / f"server-{digest}-{os.getpid()}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    reqs = context / "requirements-server.txt"
    reqs.write_text("\n".join(_runtime_requirements()) + "\n")
    wheels = ensure_wheelhouse(reqs, cache, progress)
    _link_tree(wheels, context / "wheels")
    progress("app", "building labserver's wheel")
    src = context / "app-src"
    shutil.copytree(
        REPO_ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "node_modules",
            "__pycache__",
            "*.pyc",
            "*.egg-info",
            "build",
            "dist",
            "tests",
            "labs",
            "web",
            "bench",
            "docs",
            "data",
            ".mypy_cache",
            ".ruff_cache",
            ".pytest_cache",
        ),
    )
    _stream(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--progress-bar",
            "off",
            "-w",
            str(context / "app"),
            str(src),
        ],
        "app",
        progress,
    )
    shutil.rmtree(src)
    shutil.copytree(
        LABS_DIR,
        context / "labs",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".pytest_cache"),
    )
    shutil.copytree(WEB_DIR, context / "web", ignore=shutil.ignore_patterns("__pycache__"))
    progress("build", f"building {tag}")
    _docker_build(tag, stable, IMAGES_DIR / "Dockerfile.server", context, base_image, digest, progress)
    shutil.rmtree(context, ignore_errors=True)
    return BuildResult(tag, stable, digest, True, round(time.monotonic() - t0, 2), {})


def build_postgres(*, progress: Progress = _quiet, force: bool = False) -> BuildResult:
    """``labserver/postgres:<hash>`` (+ ``:latest``) from Debian's postgresql package, offline."""
    t0 = time.monotonic()
    if not image_exists(POSTGRES_BASE):
        progress("base", f"building {POSTGRES_BASE} (Debian's postgresql)")
        env = dict(os.environ, DOCKER=docker_cli(), EXTRA_PACKAGES="postgresql")
        _stream(["bash", str(IMAGES_DIR / "make-base-image.sh"), POSTGRES_BASE], "base", progress, env)
    digest = hash_inputs(
        [
            ("Dockerfile", IMAGES_DIR / "Dockerfile.postgres"),
            ("entry", IMAGES_DIR / "postgres-entrypoint.sh"),
        ],
        [image_id(POSTGRES_BASE)],
    )[:12]
    tag, stable = f"{POSTGRES_REPO}:{digest}", f"{POSTGRES_REPO}:{STABLE_TAG}"
    if image_exists(tag) and not force:
        _docker(["tag", tag, stable])
        return BuildResult(tag, stable, digest, False, round(time.monotonic() - t0, 2), {})
    context = default_cache_dir() / "build" / f"postgres-{digest}-{os.getpid()}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    for name in ("Dockerfile.postgres", "postgres-entrypoint.sh"):
        shutil.copy2(IMAGES_DIR / name, context / name)
    _docker_build(tag, stable, context / "Dockerfile.postgres", context, POSTGRES_BASE, digest, progress)
    shutil.rmtree(context, ignore_errors=True)
    return BuildResult(tag, stable, digest, True, round(time.monotonic() - t0, 2), {})
