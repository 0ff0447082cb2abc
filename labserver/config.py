"""Settings: one pydantic-settings class, environment prefix ``LABSERVER_``.

Nested sections are plain models (``LABSERVER_DOCKER__HOSTS``). Every setting is documented in
``docs/settings.md``; a test fails when one is not."""

from __future__ import annotations

import ipaddress
import secrets
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


def _default_labs_dir() -> Path:
    bundled = Path(__file__).resolve().parent / "bundled" / "labs"
    return bundled if bundled.is_dir() else REPO_ROOT / "labs"


def _default_web_dir() -> Path:
    bundled = Path(__file__).resolve().parent / "bundled" / "web"
    return bundled if bundled.is_dir() else REPO_ROOT / "web"


class CheckSettings(BaseModel):
    log_limit_bytes: int = 64 * 1024
    default_timeout_s: float = 60.0
    max_concurrent: int = 4
    fair_queue: bool = True  # false: a plain semaphore (the old behaviour; bench/fairness.py compares)
    fair_budget_s: float = 60.0  # slot seconds per attendee per window before they are "over budget"
    fair_window_s: float = 600.0
    fair_reserve: int = 1  # slots over-budget attendees can never take (services/grading/fair_queue.py)
    # a running check that used under idle_cpu_s CPU-s in idle_after_s s lends its slot (0: never)
    idle_after_s: float = 5.0
    idle_cpu_s: float = 0.1


class DatabaseSettings(BaseModel):
    """The connection pool. Requests hold a connection only for their reads and writes, never across
    slow work, so a small pool serves a big room; a checkout waiting longer than the timeout fails."""

    pool_size: int = Field(default=5, ge=1)
    max_overflow: int = Field(default=10, ge=0)
    pool_timeout_s: float = Field(default=30.0, gt=0)


class AdmissionSettings(BaseModel):
    """Environment starts at once per server (the rest wait in a FIFO queue, and see their place).
    0 = the backend's default: local 8, docker 4 per engine. The instructor changes it at run time."""

    concurrent_starts: int = Field(default=0, ge=0)
    retry_s: float = Field(default=5.0, gt=0)  # a "no room" start is retried after this, or when room frees


class StuckSettings(BaseModel):
    time_factor: float = 2.0  # flagged when time on step > factor x the room's median time
    min_seconds: float = 300.0  # ... and at least this long
    failed_in_a_row: int = 3


class DockerSettings(BaseModel):
    hosts: list[str] = Field(default_factory=lambda: ["unix:///var/run/docker.sock"])
    nodes_file: Path | None = None
    image: str = "labserver/cpu-emu"
    # limits of every attendee container; None = the largest `requires` of the event's labs
    # (labserver/services/provisioning/env_spec.py has the rules)
    cpus: float | None = Field(default=None, gt=0, le=256)
    memory_mb: int | None = Field(default=None, ge=128)
    pids: int = 256
    warm_pool: int = 0
    idle_cull_minutes: float = 0.0
    engine_concurrency: int = Field(default=8, ge=1, le=256)  # create/start calls at once per engine
    # every engine API call gives up after this long (connect and each read): a frozen engine is
    # "does not answer", never a hung request
    engine_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # the Engine API version spoken; a fixed one means no call at client creation (which would block
    # the server's event loop on a frozen engine). 1.41 = Docker 20.10 and later. "auto" asks.
    api_version: str = "1.41"
    usage_resync_s: float = Field(default=60.0, gt=0)  # placement usage re-read from labels this often
    name_prefix: str = "labserver"  # containers are <prefix>-<env id>; servers sharing an engine differ
    workspace_mb: int = Field(default=0, ge=0, le=1_000_000)  # workspace size limit (0: none; disk.py)


class KubernetesSettings(BaseModel):
    """The Kubernetes backend (docs/kubernetes.md): one pod + one workspace PVC per attendee."""

    kubeconfig: Path | None = None  # none: the in-cluster service account, else ~/.kube/config
    context: str = ""  # kubeconfig context ("" = its current one)
    namespace: str = "labserver-envs"  # where attendee pods, PVCs and graders go
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    # the device plugin's resource of one card: huawei.com/Ascend910, huawei.com/Ascend310P, or a
    # vNPU template such as huawei.com/Ascend910-4c; "" = the cluster has no cards (CPU emulation)
    npu_resource: str = "huawei.com/Ascend910"
    cpu_fallback: bool = True  # a lab that allows CPU emulation gets it when no card is free
    ephemeral_storage_mb: int = Field(default=4096, ge=64)  # /tmp, home, logs of each pod
    workspace_gi: int = Field(default=5, ge=1, le=10_000)  # size of each workspace PVC
    storage_class: str = ""  # "" = the cluster's default StorageClass
    node_selector: dict[str, str] = Field(default_factory=dict)  # every attendee pod
    npu_node_selector: dict[str, str] = Field(default_factory=dict)  # pods that hold a card
    tolerations: list[dict[str, str]] = Field(default_factory=list)  # JSON list of tolerations
    scheduler_name: str = ""  # "volcano" for Volcano; "" = the default scheduler
    server_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "labserver"}
    )  # the labserver pods: the only ingress attendee pods accept
    name_prefix: str = "labserver"  # pods and PVCs are <prefix>-<escaped env id>
    ready_timeout_s: float = Field(default=300.0, gt=0)  # a pod not Ready by then fails to start
    api_timeout_s: float = Field(default=30.0, gt=0, le=600)  # each API request
    api_attempts: int = Field(default=4, ge=1, le=20)  # tries of a call the API server did not answer


class RecordingSettings(BaseModel):
    """Terminal recordings (asciicast v2, labserver/terminals/recorder.py): every attendee shell's output, kept
    under ``DATA_DIR/recordings/<environment>/`` and deleted with the environment's workspace."""

    enabled: bool = True
    # all of one attendee's recordings together; past it a session records no more (a marker says so)
    max_mb: float = Field(default=20.0, gt=0, le=100_000)
    flush_s: float = Field(default=0.5, gt=0, le=60)  # output is written in batches this often


class LocalSettings(BaseModel):
    """The local backend's isolation (docs/security.md)."""

    # a root server runs each environment under a uid of its own: uid_base + n, n < uid_count
    # (above systemd-nspawn's and the usual /etc/subuid ranges)
    uid_base: int = Field(default=1_900_000_000, ge=1000, le=4_000_000_000)
    uid_count: int = Field(default=65536, ge=1, le=10_000_000)
    limits: Literal["auto", "cgroup2", "cgroup1", "rlimit", "none"] = "auto"  # auto: best that works
    cgroup_parent: str = ""  # cgroup under which environments' groups go (default: the server's own)
    # how checks start: "zygote" forks the checker and its children from a sandboxed process per
    # environment and lab that imported torch once (backends/local_zygote.py); "process" starts a
    # new interpreter per check
    check_runner: Literal["zygote", "process"] = "zygote"
    runner_idle_s: float = Field(default=900.0, ge=5.0)  # a check runner unused this long is stopped


class LogSettings(BaseModel):
    """What the server logs and how (labserver/observability/logging_json.py, docs/operations.md)."""

    format: Literal["text", "json"] = "text"  # json: one object per line with request/attendee/env ids
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class MetricsSettings(BaseModel):
    """Who may read ``GET /metrics`` besides an instructor (routes/metrics.py)."""

    token: str = ""  # a bearer token for a Prometheus scraper ('' = none)
    networks: list[str] = Field(default_factory=list)  # client networks (CIDR) allowed without a token

    @field_validator("networks")
    @classmethod
    def _networks_parse(cls, value: list[str]) -> list[str]:
        for network in value:
            ipaddress.ip_network(network, strict=False)  # a ValueError names the bad one at start
        return value


class OidcSettings(BaseModel):
    """Staff sign-in through the organisation's OpenID Connect provider (services/staff/oidc.py)."""

    issuer: str = ""  # the provider's issuer URL ("" = no OpenID Connect sign-in); discovery is read from it
    client_id: str = ""
    client_secret: str = ""
    scope: str = "openid email profile"
    name: str = "your organisation"  # shown on the button: "Sign in with <name>"
    # "claim=pattern:role[@EVENTCODE]" rules mapping the provider's claims to roles
    roles: list[str] = Field(default_factory=list)

    @field_validator("roles")
    @classmethod
    def _rules_parse(cls, value: list[str]) -> list[str]:
        for rule in value:
            parse_role_rule(rule)  # a ValueError names the bad rule at start
        return value


def parse_role_rule(text: str) -> tuple[str, str, str, str]:
    """``claim=pattern:role[@EVENTCODE]`` -> (claim, pattern, role, event code or ""); ValueError
    saying what is wrong (the rule's meaning: services/staff/oidc.py)."""
    claim, eq, rest = text.partition("=")
    pattern, colon, target = rest.rpartition(":")
    role, _at, code = target.partition("@")
    if not eq or not colon or not claim.strip() or not pattern:
        raise ValueError(
            f"role rule {text!r}: write claim=pattern:role[@EVENTCODE], e.g. groups=ta:assistant"
        )
    if role.strip().lower() not in ("organiser", "instructor", "assistant"):
        raise ValueError(f"role rule {text!r}: the role is organiser, instructor or assistant")
    return claim.strip(), pattern.strip(), role.strip().lower(), code.strip().upper()


class StaffSettings(BaseModel):
    """Staff accounts and sessions (services/staff/, docs/instructor-guide.md#staff-an-event)."""

    # the instructor token (LABSERVER_INSTRUCTOR_TOKEN) signs in as an organiser of every event
    # (first sign-in, scripts); false turns it off once people have accounts
    bootstrap_token: bool = True
    session_hours: float = Field(default=12.0, gt=0, le=24 * 90)  # a staff sign-in lasts this long
    link_hours: float = Field(default=24.0, gt=0, le=24 * 90)  # a one-time sign-in link is valid this long
    # how often open staff streams, terminal views and shares are checked against their sessions
    revoke_poll_s: float = Field(default=2.0, gt=0, le=60)
    oidc: OidcSettings = Field(default_factory=OidcSettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LABSERVER_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(default_factory=lambda: Path.cwd() / "data")
    database_url: str = ""  # default: sqlite under data_dir
    backend: Literal["local", "docker", "kubernetes"] = "local"
    instructor_token: str = ""  # generated and printed by `serve` when empty
    default_event_code: str = ""  # generated when empty
    default_event_title: str = "CANN inference optimization workshop"
    labs_dir: Path = Field(default_factory=_default_labs_dir)
    web_dir: Path = Field(default_factory=_default_web_dir)
    secret_key: str = ""  # signs session cookies; generated and stored in data_dir when empty
    trusted_origins: list[str] = Field(default_factory=list)  # besides the Host: for proxies (csrf.py)
    sandbox: Literal["auto", "bwrap", "none"] = "auto"  # local backend isolation (docs/security.md)
    allow_unsandboxed: bool = False  # without a working sandbox, admit attendees from other machines
    selfpaced: bool = False
    checks: CheckSettings = Field(default_factory=CheckSettings)
    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    stuck: StuckSettings = Field(default_factory=StuckSettings)
    docker: DockerSettings = Field(default_factory=DockerSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    local: LocalSettings = Field(default_factory=LocalSettings)
    recording: RecordingSettings = Field(default_factory=RecordingSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    staff: StaffSettings = Field(default_factory=StaffSettings)

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'labserver.db'}"

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    @property
    def recordings_dir(self) -> Path:
        return self.data_dir / "recordings"

    def ensure_secret_key(self) -> str:
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        if path.exists():
            self.secret_key = path.read_text().strip()
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.secret_key = secrets.token_urlsafe(32)
            path.write_text(self.secret_key)
            path.chmod(0o600)
        return self.secret_key
