"""``labserver doctor``: will this server serve a room? Each check looks at one thing the server
needs, as the server itself would use it, and answers a :class:`Finding`:

| check | looks at | fails (the room cannot be served) when |
|---|---|---|
| ``engine`` | each Docker engine (``LABSERVER_DOCKER__HOSTS`` / nodes file): answers, version, API; or the Kubernetes API server (and ``namespace``) | an engine does not answer or speaks too old an API; the API server does not answer, the namespace is missing |
| ``images`` | the lab image(s) the event's labs need, on each engine that answered; their tags | an image is missing on an engine |
| ``sandbox`` | local backend: bubblewrap, measured as the backend measures it at start | isolation is incomplete and ``ALLOW_UNSANDBOXED`` is off (remote attendees are refused) |
| ``runtime`` | local, root server without bubblewrap: whether the environments' uids can start this server's Python (every folder on the way, through symlinks) | they cannot (a Python under a 0700 ``/root``, e.g. pyenv): every check would fail |
| ``userns`` | user namespaces (``/proc/sys/user/max_user_namespaces``, the Debian and Ubuntu switches) | never (a warning explaining a bubblewrap failure) |
| ``limits`` | local: the cgroup v2 / v1 / rlimit mechanism in force; docker: the engine's cgroup version and limit support | no limits at all and ``ALLOW_UNSANDBOXED`` off |
| ``disk`` | free space in ``DATA_DIR`` and a 1 MiB write there | under 256 MiB free or the write fails |
| ``database`` | a connection (5 s timeout), and the migration revision against this code's head | no connection, or a revision this code does not know (a newer server wrote it) |
| ``clock`` | PostgreSQL's clock against this machine's; each engine's ``SystemTime`` | never (a warning over 2 s) |
| ``port`` | the address ``serve`` will listen on can be bound | it cannot (in use, not this machine's, needs root) |
| ``labs`` | the lab catalog | no lab loads |

Warnings are things to know before the doors open (few seconds of clock skew, a lab that does not
load, migrations ``serve`` will apply). Every finding that is not ``ok`` carries what to fix in
English and Chinese, from :data:`FIXES` (one table, read line by line against the checks below; the
command prints both languages at once, so the pair lives together rather than in a gettext
catalog). Nothing here changes the machine: the database is opened read-only when it is a SQLite
file, nothing is created in ``DATA_DIR`` but a probe file that is removed at once."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import errno
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from kubernetes import client as kclient
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from labserver.backends.docker import images as docker_images
from labserver.backends.docker.engines import nodes_from_settings
from labserver.backends.docker.scheduler import Node
from labserver.backends.kubernetes.api import load_configuration
from labserver.backends.local import LocalBackend
from labserver.config import Settings
from labserver.content import LabCatalog
from labserver.db import alembic_config
from labserver.services.provisioning import env_spec

#: below this much free space in DATA_DIR the server would soon fail (checks, saves, the database)
MIN_FREE_MB = 256
WARN_FREE_MB = 2048
SKEW_WARN_S = 2.0
TIMEOUT_S = 5.0
#: the oldest Engine API labserver speaks (Docker 20.10)
MIN_API = (1, 41)


class Status(enum.StrEnum):
    ok = "ok"
    warn = "warn"
    fail = "fail"
    skip = "skip"


#: what to do, per problem: (English, Chinese). ``{name}`` fields come from the finding.
FIXES: dict[str, tuple[str, str]] = {
    "engine-down": (
        "Start the Docker engine on that machine (systemctl start docker), or correct "
        "LABSERVER_DOCKER__HOSTS / the nodes file; the server's user needs access to the socket.",
        "启动该机器上的 Docker 引擎（systemctl start docker），或改正 LABSERVER_DOCKER__HOSTS / 节点文件；"
        "运行服务器的用户须能访问该套接字。",
    ),
    "k8s-config": (
        "Set LABSERVER_KUBERNETES__KUBECONFIG (and __CONTEXT) to a kubeconfig of the cluster, or run the "
        "server in the cluster with its service account (provisioning/kubernetes).",
        "将 LABSERVER_KUBERNETES__KUBECONFIG（及 __CONTEXT）设为集群的 kubeconfig，或以服务账号在集群内运行服务器（provisioning/kubernetes）。",
    ),
    "k8s-down": (
        "The Kubernetes API server does not answer: check the cluster, the kubeconfig's server address "
        "and the network between them.",
        "Kubernetes API 服务器无应答：检查集群、kubeconfig 中的服务器地址以及两者之间的网络。",
    ),
    "k8s-namespace": (
        "Create the namespace {namespace} and the server's RBAC: kubectl apply -k provisioning/kubernetes/base.",
        "创建命名空间 {namespace} 及服务器的 RBAC：kubectl apply -k provisioning/kubernetes/base。",
    ),
    "engine-old": (
        "Upgrade Docker on that machine to 20.10 or later (Engine API 1.41), or set "
        "LABSERVER_DOCKER__API_VERSION=auto.",
        "将该机器上的 Docker 升级到 20.10 或更高版本（Engine API 1.41），或设置 LABSERVER_DOCKER__API_VERSION=auto。",
    ),
    "image-missing": (
        "Build the image on this machine (labserver images build) and copy it to the other engines "
        "(labserver images copy {image} {url}).",
        "在本机构建镜像（labserver images build），再复制到其他引擎（labserver images copy {image} {url}）。",
    ),
    "image-stale": (
        "labkit or the image's Dockerfile changed since the image was built: run labserver images build.",
        "镜像构建后 labkit 或 Dockerfile 已改动：运行 labserver images build。",
    ),
    "sandbox": (
        "Install bubblewrap (apt-get install bubblewrap) and allow user namespaces (see userns), or "
        "set LABSERVER_ALLOW_UNSANDBOXED=1 to admit attendees from other machines without isolation.",
        "安装 bubblewrap（apt-get install bubblewrap）并允许用户命名空间（见 userns），或设置 "
        "LABSERVER_ALLOW_UNSANDBOXED=1，在没有隔离的情况下接纳其他机器上的学员。",
    ),
    "runtime": (
        "Checks run {python} as each environment's own uid, and {blocked}. Either install bubblewrap and "
        "keep LABSERVER_SANDBOX=auto (the sandbox shows them the runtime), or make the server's virtualenv "
        "from a Python they can reach (/usr/bin/python3 -m venv, or a Python installed under /opt) and "
        "start labserver from it.",
        "检查以各环境自己的 uid 运行 {python}，但路径上有它们无法进入的文件夹或文件（{blocked}）。请安装 bubblewrap 并保持 LABSERVER_SANDBOX=auto"
        "（沙箱会让它们看到运行时），或用它们能访问的 Python 创建服务器的虚拟环境（/usr/bin/python3 -m venv，"
        "或安装在 /opt 下的 Python），再从该环境启动 labserver。",
    ),
    "userns": (
        "Allow unprivileged user namespaces: sysctl -w {setting} (and put it in /etc/sysctl.d/ to keep it).",
        "允许非特权用户命名空间：sysctl -w {setting}（写入 /etc/sysctl.d/ 以便重启后保留）。",
    ),
    "limits-weak": (
        "Only per-process limits: run the server as root, or under systemd with Delegate=yes, so that "
        "each environment gets a cgroup v2 group (pids, memory, cpu).",
        "只有按进程的限制：以 root 运行服务器，或在 systemd 中设置 Delegate=yes，使每个环境获得 cgroup v2 组（pids、memory、cpu）。",
    ),
    "limits-none": (
        "No resource limits work here: install util-linux (prlimit), or run the server as root so it can "
        "use cgroups.",
        "此处没有可用的资源限制：安装 util-linux（prlimit），或以 root 运行服务器以使用 cgroup。",
    ),
    "engine-limits": (
        "The engine cannot enforce {missing}: enable the kernel's cgroup controllers (cgroup v2: "
        "systemd.unified_cgroup_hierarchy=1) on that machine.",
        "该引擎无法实施 {missing}：在该机器上启用内核的 cgroup 控制器（cgroup v2：systemd.unified_cgroup_hierarchy=1）。",
    ),
    "disk-full": (
        "Free space in {path} (old workspaces, caches, logs) or point LABSERVER_DATA_DIR at a bigger disk; "
        "the server needs at least {need} MB free.",
        "清理 {path} 的空间（旧工作区、缓存、日志），或将 LABSERVER_DATA_DIR 指向更大的磁盘；服务器至少需要 {need} MB 可用空间。",
    ),
    "disk-low": (
        "Less than {need} MB free in {path}: a room of attendees fills it quickly; free space or move "
        "LABSERVER_DATA_DIR.",
        "{path} 的可用空间少于 {need} MB：一整场学员很快会用满；请清理空间或迁移 LABSERVER_DATA_DIR。",
    ),
    "db-down": (
        "Start the database server, or correct LABSERVER_DATABASE_URL (host, port, user, password); for "
        "PostgreSQL check listen_addresses and pg_hba.conf.",
        "启动数据库服务器，或改正 LABSERVER_DATABASE_URL（主机、端口、用户、密码）；PostgreSQL 请检查 listen_addresses 与 pg_hba.conf。",
    ),
    "db-behind": (
        "The database is at revision {current}, this server's head is {head}: serve upgrades it at start "
        "(or run labserver db upgrade now, with a backup).",
        "数据库版本为 {current}，本服务器的最新版本为 {head}：serve 启动时会升级（或先备份，再立即运行 labserver db upgrade）。",
    ),
    "db-newer": (
        "The database was written by a newer labserver (revision {current} is unknown here): run that "
        "version, or restore a backup made for this one.",
        "数据库由更新版本的 labserver 写入（此处不认识版本 {current}）：请运行该版本，或恢复适用于本版本的备份。",
    ),
    "clock-skew": (
        "This machine's clock and {other}'s differ by {skew} s: enable time synchronisation on both "
        "(timedatectl set-ntp true, chrony).",
        "本机与 {other} 的时钟相差 {skew} 秒：在两边启用时间同步（timedatectl set-ntp true、chrony）。",
    ),
    "port": (
        "Stop what listens on {host}:{port} or start the server with another --port (or --host); ports "
        "below 1024 need root.",
        "停止占用 {host}:{port} 的程序，或用其他 --port（或 --host）启动服务器；1024 以下端口需要 root。",
    ),
    "labs-none": (
        "No lab loads from {path}: set LABSERVER_LABS_DIR to the repository's labs/ folder and run "
        "labserver lint.",
        "无法从 {path} 加载任何实验：将 LABSERVER_LABS_DIR 设为仓库的 labs/ 目录并运行 labserver lint。",
    ),
    "labs-broken": (
        "Some labs do not load and are shown as unavailable: run labserver lint {labs}.",
        "部分实验无法加载，将显示为不可用：运行 labserver lint {labs}。",
    ),
}


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str  # what was found, for the operator (English; names paths, versions, errors)
    fix: str = ""  # a key of FIXES
    args: Mapping[str, object] = field(default_factory=dict)

    def fix_text(self, lang: str) -> str:
        if not self.fix:
            return ""
        en, zh = FIXES[self.fix]
        return (zh if lang == "zh" else en).format(**self.args)


@dataclass
class Report:
    findings: list[Finding]

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.status == Status.fail]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.status == Status.warn]

    @property
    def ok(self) -> bool:
        return not self.failures

    def of(self, check: str) -> list[Finding]:
        return [f for f in self.findings if f.check == check]


def diagnose(settings: Settings, *, host: str = "127.0.0.1", port: int | None = 8000) -> Report:
    """Every check, in the table's order (``port`` None: not checked). Never raises for what it
    finds: a check that crashes is a ``fail`` naming the exception."""
    findings: list[Finding] = []
    steps: list[Callable[[], Iterator[Finding]]] = []
    if settings.backend == "docker":
        steps.append(lambda: _docker_checks(settings))
    elif settings.backend == "kubernetes":
        steps.append(lambda: _kubernetes_checks(settings))
    else:
        steps.append(lambda: _local_checks(settings))
    steps += [lambda: _disk(settings), lambda: _database(settings)]
    if port is not None:
        steps.append(lambda: _port(host, port))
    steps.append(lambda: _labs(settings))
    for step in steps:
        try:
            findings.extend(step())
        except Exception as exc:  # noqa: BLE001 (a doctor that crashes tells nothing)
            findings.append(Finding("doctor", Status.fail, f"a check crashed: {type(exc).__name__}: {exc}"))
    return Report(findings)


# -- engines (docker) -------------------------------------------------------------------------------
def _api_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return (0,)


def _docker_checks(settings: Settings) -> Iterator[Finding]:
    cfg = settings.docker
    nodes = nodes_from_settings(cfg)
    needed = _needed_images(settings)
    for node in nodes:
        client = None
        try:
            client = docker.DockerClient(
                base_url=node.url,
                version=cfg.api_version,
                timeout=min(TIMEOUT_S, cfg.engine_timeout_s),
                use_ssh_client=node.url.startswith("ssh://"),
            )
            t0 = time.time()
            version = client.version()
            info = client.info()
            t1 = time.time()
        except Exception as exc:  # noqa: BLE001 (any failure to talk is "does not answer")
            reason = _engine_error(exc)
            old = "too new" in reason or "too old" in reason
            yield Finding(
                "engine",
                Status.fail,
                f"{node.name} ({node.url}): {reason}",
                "engine-old" if old else "engine-down",
            )
            if client is not None:
                client.close()
            continue
        api = str(version.get("ApiVersion", "?"))
        text = f"{node.name} ({node.url}): Docker {version.get('Version', '?')}, API {api}"
        if _api_tuple(api) < MIN_API:
            yield Finding("engine", Status.fail, text + " (labserver needs API 1.41)", "engine-old")
        else:
            yield Finding("engine", Status.ok, text)
        yield from _images_on(client, node, needed)
        yield _engine_limits(node, info)
        yield _engine_clock(node, info, (t0 + t1) / 2)
        client.close()


def _engine_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    for marker in ("Connection refused", "No such file or directory", "Permission denied", "timed out"):
        if marker in text:
            return f"does not answer ({marker.lower()})"
    return f"does not answer ({text[:300]})"


def _needed_images(settings: Settings) -> list[str]:
    catalog = LabCatalog(settings.labs_dir)
    labs = list(catalog.labs.values())
    out = [_tagged(env_spec.image_for("", labs, settings.docker.image))]
    for lab in labs:
        named = _tagged(env_spec.image_for("", [lab], settings.docker.image))
        if named not in out:
            out.append(named)
    return out


def _tagged(image: str) -> str:
    """``repo`` -> ``repo:latest`` (what the engine resolves it to); tagged or digested as it is."""
    last = image.rsplit("/", 1)[-1]
    return image if "@" in image or ":" in last else f"{image}:latest"


def _images_on(client: docker.DockerClient, node: Node, needed: list[str]) -> Iterator[Finding]:
    for ref in needed:
        try:
            image = client.images.get(ref)
        except docker.errors.ImageNotFound:
            yield Finding(
                "images",
                Status.fail,
                f"{node.name}: {ref} is not present",
                "image-missing",
                {"image": ref, "url": node.url},
            )
            continue
        except Exception as exc:  # noqa: BLE001
            yield Finding(
                "images",
                Status.fail,
                f"{node.name}: {ref}: {exc}",
                "image-missing",
                {"image": ref, "url": node.url},
            )
            continue
        tags = sorted(t for t in image.tags if t != ref)
        text = f"{node.name}: {ref} = {image.short_id.removeprefix('sha256:')}"
        if tags:
            text += f" (also {', '.join(tags)})"
        stale = _stale(ref, image, node)
        if stale:
            yield Finding("images", Status.warn, f"{text}; {stale}", "image-stale")
        else:
            yield Finding("images", Status.ok, text)


def _stale(ref: str, image: docker.models.images.Image, node: Node) -> str:
    """For the cpu-emu image on this machine's engine: '' when it carries the content hash of this
    checkout's labkit and Dockerfile (or that cannot be told), else what differs."""
    if not ref.startswith(docker_images.CPU_EMU_REPO + ":") or node.url != "unix:///var/run/docker.sock":
        return ""
    if not docker_images.IMAGES_DIR.is_dir():  # an installed wheel: nothing to compare against
        return ""
    have = (image.labels or {}).get(docker_images.HASH_LABEL, "")
    try:
        want = docker_images.cpu_emu_hash()
    except Exception:  # noqa: BLE001 (no docker CLI, no base image: cannot tell)
        return ""
    return "" if not have or have == want else f"built from {have}, this checkout is {want}"


def _engine_limits(node: Node, info: dict[str, object]) -> Finding:
    wanted = {"MemoryLimit": "memory", "PidsLimit": "pids", "CpuCfsQuota": "cpu quota", "SwapLimit": "swap"}
    missing = [name for key, name in wanted.items() if info.get(key) is False]
    text = f"{node.name}: cgroup v{info.get('CgroupVersion', '?')} ({info.get('CgroupDriver', '?')})"
    if missing:
        return Finding(
            "limits",
            Status.warn,
            f"{text}; no {', '.join(missing)} limits",
            "engine-limits",
            {"missing": ", ".join(missing)},
        )
    return Finding("limits", Status.ok, text + "; memory, pids and cpu limits enforced")


def _engine_clock(node: Node, info: dict[str, object], local: float) -> Finding:
    raw = str(info.get("SystemTime", ""))
    try:
        # "2026-12-01T16:18:05.123456789Z": Python parses at most microseconds
        head, _, frac = raw.rstrip("Z").partition(".")
        when = dt.datetime.fromisoformat(head).replace(tzinfo=dt.UTC)
        engine = when.timestamp() + (float("0." + frac[:6]) if frac else 0.0)
    except ValueError:
        return Finding("clock", Status.skip, f"{node.name}: the engine gave no time ({raw!r})")
    return _skew(f"{node.name} ({node.url})", engine - local)


def _skew(other: str, skew: float) -> Finding:
    text = f"{other}: {skew:+.2f} s from this machine"
    if abs(skew) > SKEW_WARN_S:
        return Finding("clock", Status.warn, text, "clock-skew", {"other": other, "skew": f"{abs(skew):.1f}"})
    return Finding("clock", Status.ok, text)


# -- kubernetes ------------------------------------------------------------------------------------
def _kubernetes_checks(settings: Settings) -> Iterator[Finding]:
    """The API server answers (its version) and the environments' namespace exists. What the
    nodes hold (images, cards, limits) is the cluster's to report: ``docs/kubernetes.md``."""
    cfg = settings.kubernetes
    try:
        conf = load_configuration(cfg)
    except Exception as exc:  # noqa: BLE001 (no kubeconfig, no service account)
        yield Finding("engine", Status.fail, f"no cluster configuration: {_first_line(exc)}", "k8s-config")
        return
    conf.retries = 0
    with kclient.ApiClient(conf) as api:
        try:
            version = kclient.VersionApi(api).get_code(_request_timeout=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            yield Finding(
                "engine", Status.fail, f"{conf.host}: does not answer ({_first_line(exc)})", "k8s-down"
            )
            return
        yield Finding("engine", Status.ok, f"{conf.host}: Kubernetes {version.git_version}")
        try:
            kclient.CoreV1Api(api).read_namespace(cfg.namespace, _request_timeout=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 (404, or 403 for want of RBAC)
            yield Finding(
                "namespace",
                Status.fail,
                f"{cfg.namespace}: {_first_line(exc)}",
                "k8s-namespace",
                {"namespace": cfg.namespace},
            )
            return
        yield Finding("namespace", Status.ok, f"{cfg.namespace} exists")


# -- the local backend ----------------------------------------------------------------------------
def _local_checks(settings: Settings) -> Iterator[Finding]:
    yield Finding("engine", Status.skip, f"the {settings.backend} backend: no container engine needed")
    refuses = not settings.allow_unsandboxed
    bad = Status.fail if refuses else Status.warn
    effect = (
        "attendees from other machines would be refused"
        if refuses
        else "attendees from other machines are admitted anyway (LABSERVER_ALLOW_UNSANDBOXED)"
    )
    try:
        backend = LocalBackend(settings)
    except RuntimeError as exc:  # LABSERVER_SANDBOX=bwrap or LIMITS=<x> that does not work here
        yield Finding("sandbox", Status.fail, str(exc), "sandbox")
        yield from _userns(failed=True)
        return
    iso = backend.isolation
    uid = settings.local.uid_base
    blocked = backend.runtime_problem(uid, uid)
    # the probe's own failure says the same as the runtime finding below, with the right fix there
    sandbox_problems = [
        p for p in iso.problems if "resource limits" not in p and not (blocked and "cannot run here" in p)
    ]
    if sandbox_problems:
        yield Finding("sandbox", bad, f"{'; '.join(sandbox_problems)}: {effect}", "sandbox")
    else:
        yield Finding("sandbox", Status.ok, f"sandbox={iso.sandbox}; attendee processes run as {iso.user}")
    if blocked:
        yield Finding(
            "runtime",
            Status.fail,
            f"{backend.python}: {blocked}: every check would fail",
            "runtime",
            {"python": backend.python, "blocked": blocked},
        )
    elif backend.switch and not backend.bwrap:
        yield Finding("runtime", Status.ok, f"uid {uid}+n can start {backend.python}")
    yield from _userns(failed=iso.sandbox != "bubblewrap" and settings.sandbox != "none")
    detail = f" ({iso.limits_detail})" if iso.limits_detail else ""
    if iso.limits in ("cgroup2", "cgroup1"):
        yield Finding("limits", Status.ok, f"{iso.limits}: pids, memory and cpu per environment{detail}")
    elif iso.limits == "rlimit":
        yield Finding("limits", Status.warn, f"rlimit: per process only{detail}", "limits-weak")
    else:
        yield Finding("limits", bad, f"no resource limits{detail}: {effect}", "limits-none")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _userns(*, failed: bool) -> Iterator[Finding]:
    """User namespaces as the kernel allows them; a warning only when bubblewrap failed and a
    switch explains why."""
    problems: list[tuple[str, str]] = []
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        problems.append(("max_user_namespaces is 0", "user.max_user_namespaces=15000"))
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        problems.append(("unprivileged_userns_clone is 0", "kernel.unprivileged_userns_clone=1"))
    if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" and os.geteuid() != 0:
        problems.append(
            (
                "AppArmor restricts unprivileged user namespaces",
                "kernel.apparmor_restrict_unprivileged_userns=0",
            )
        )
    if not problems:
        yield Finding(
            "userns",
            Status.ok,
            f"user namespaces allowed (max {_read('/proc/sys/user/max_user_namespaces')})",
        )
        return
    text = "; ".join(p for p, _ in problems)
    yield Finding(
        "userns",
        Status.warn if failed else Status.ok,
        text,
        "userns" if failed else "",
        {"setting": problems[0][1]},
    )


# -- disk, database, port, labs -------------------------------------------------------------------
def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _disk(settings: Settings) -> Iterator[Finding]:
    where = _existing(settings.data_dir)
    usage = shutil.disk_usage(where)
    free_mb = usage.free // 2**20
    args = {"path": str(settings.data_dir), "need": MIN_FREE_MB}
    problem = _probe_write(where)
    text = f"{settings.data_dir}: {free_mb} MB free of {usage.total // 2**20} MB"
    if problem or free_mb < MIN_FREE_MB:
        yield Finding(
            "disk",
            Status.fail,
            text + (f"; writing there fails: {problem}" if problem else ""),
            "disk-full",
            args,
        )
    elif free_mb < WARN_FREE_MB:
        yield Finding("disk", Status.warn, text, "disk-low", {**args, "need": WARN_FREE_MB})
    else:
        yield Finding("disk", Status.ok, text)


def _probe_write(folder: Path) -> str:
    """'' when 1 MiB can be written (and synced) in ``folder``; else the error."""
    try:
        fd, name = tempfile.mkstemp(prefix=".labserver-doctor-", dir=folder)
    except OSError as exc:
        return f"{errno.errorcode.get(exc.errno or 0, '')} {exc.strerror}".strip()
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(b"\0" * 2**20)
            out.flush()
            os.fsync(out.fileno())
        return ""
    except OSError as exc:
        return f"{errno.errorcode.get(exc.errno or 0, '')} {exc.strerror}".strip()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _database(settings: Settings) -> Iterator[Finding]:
    url = make_url(settings.sqlalchemy_url)
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "")
        if not url.database or url.database == ":memory:":
            yield Finding("database", Status.ok, f"{shown}: in memory")
            return
        if not path.exists():
            yield Finding("database", Status.ok, f"{shown}: not created yet (serve creates it)")
            yield Finding("clock", Status.ok, "SQLite: the database is on this machine")
            return
        engine = sa.create_engine(f"sqlite:///file:{path}?mode=ro&uri=true", poolclass=NullPool)
    else:
        driver = url.set(drivername="postgresql+psycopg") if url.drivername == "postgresql" else url
        engine = sa.create_engine(
            driver, poolclass=NullPool, connect_args={"connect_timeout": int(TIMEOUT_S)}
        )
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            skew = _db_skew(conn) if url.get_backend_name() != "sqlite" else None
    except Exception as exc:  # noqa: BLE001
        yield Finding("database", Status.fail, f"{shown}: no connection ({_first_line(exc)})", "db-down")
        return
    finally:
        engine.dispose()
    yield Finding("database", Status.ok, f"{shown}: connected")
    yield _migrations(current)
    if skew is None:
        yield Finding("clock", Status.ok, "SQLite: the database is on this machine")
    else:
        yield _skew(f"the database ({url.host})", skew)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _db_skew(conn: sa.Connection) -> float:
    t0 = time.time()
    db_now = float(conn.execute(sa.text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).scalar_one())
    t1 = time.time()
    return db_now - (t0 + t1) / 2


def _migrations(current: str | None) -> Finding:
    script = ScriptDirectory.from_config(alembic_config(sa.create_engine("sqlite://")))
    head = script.get_current_head()
    if current is None:
        return Finding("migrations", Status.ok, f"no tables yet (serve creates them at {head})")
    if current == head:
        return Finding("migrations", Status.ok, f"at head ({head})")
    known = {rev.revision for rev in script.walk_revisions()}
    args = {"current": current, "head": head}
    if current not in known:
        return Finding(
            "migrations", Status.fail, f"at {current}, unknown to this server (head {head})", "db-newer", args
        )
    return Finding("migrations", Status.warn, f"at {current}, head is {head}", "db-behind", args)


def _port(host: str, port: int) -> Iterator[Finding]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            yield Finding(
                "port",
                Status.fail,
                f"{host}:{port} cannot be bound: {exc.strerror}",
                "port",
                {"host": host, "port": port},
            )
            return
    yield Finding("port", Status.ok, f"{host}:{port} is free")


def _labs(settings: Settings) -> Iterator[Finding]:
    catalog = LabCatalog(settings.labs_dir)
    if not catalog.labs:
        yield Finding(
            "labs",
            Status.fail,
            f"no lab loads from {settings.labs_dir}",
            "labs-none",
            {"path": str(settings.labs_dir)},
        )
        return
    yield Finding("labs", Status.ok, f"{len(catalog.labs)} labs: {', '.join(catalog.labs)}")
    if catalog.broken:
        names = " ".join(sorted(catalog.broken))
        yield Finding("labs", Status.warn, f"unavailable: {names}", "labs-broken", {"labs": names})
