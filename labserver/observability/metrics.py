"""In-process metrics, published at ``GET /metrics`` in Prometheus text format (who may read it:
``routes/metrics.py``; every metric, with what to watch for: ``docs/operations.md``).

Kept in this process as they happen:

- ``labserver_http_request_duration_seconds`` (histogram; ``method``, ``route`` = the route's
  template, never the raw path, ``status``): time to the response's first byte
  (``labserver/edge/http_observe.py``). An SSE stream counts until its headers are out, not its life.
- ``labserver_db_pool_wait_seconds`` (histogram): how long each database connection checkout waited
  for the pool (:class:`TimedQueuePool`, the pool class :func:`labserver.db.make_engine` uses). A
  growing tail means something holds connections across slow work, or the pool is too small.
- ``labserver_db_pool_timeouts_total``: checkouts that gave up after ``LABSERVER_DB__POOL_TIMEOUT_S``.
- ``labserver_env_start_seconds`` (histogram, ``phase`` = queue | create): time environments spent
  waiting for admission, and being created/started by the engine (services/provisioning/admission.py).
- ``labserver_env_provision_seconds`` (histogram; ``backend``, ``outcome`` = ready | failed): from
  "provisioning" to ready or failed, what the attendee waited (queue included).
- ``labserver_env_provision_failures_total`` (``reason``): failed starts by the backend's reason label.
- ``labserver_env_queue_length`` (gauge): environment starts waiting for admission now.
- ``labserver_check_duration_seconds`` and ``labserver_check_queue_wait_seconds`` (histograms;
  ``lab``, ``step``, ``status``): the checker's run time, and the wait for a check slot in the fair
  queue, both observed once when the check finishes (:func:`check_finished`).
- ``labserver_engine_errors_total`` (``backend``, ``error`` = the exception's class): engine calls
  that raised (a ``NotFound`` is often expected: an idempotent create looks up first).

Read at each scrape from the server's state (:class:`Snapshot`, built by
``services/operations/metrics_snapshot.py``): ``labserver_environments`` (``state``, ``reason``),
``labserver_terminals_open`` / ``labserver_terminals_attached``, ``labserver_sse_clients``,
``labserver_checks_waiting``, and the live hub's counts so far: ``labserver_live_events_total``
(``kind``), ``labserver_live_deliveries_total``, ``labserver_live_encodes_total``.

One registry per process (the metrics describe the process, as the pool they watch does)."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool

from labserver.models import CheckRun

log = logging.getLogger("labserver.checks")

REGISTRY = CollectorRegistry(auto_describe=True)
_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_CHECK_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)

HTTP_LATENCY = Histogram(
    "labserver_http_request_duration_seconds",
    "Time from request to the response's first byte, by method, route template and status",
    ["method", "route", "status"],
    buckets=_HTTP_BUCKETS,
    registry=REGISTRY,
)
DB_POOL_WAIT = Histogram(
    "labserver_db_pool_wait_seconds",
    "Time a database connection checkout waited for the pool",
    buckets=_BUCKETS,
    registry=REGISTRY,
)
DB_POOL_TIMEOUTS = Counter(
    "labserver_db_pool_timeouts", "Checkouts that timed out waiting for the pool", registry=REGISTRY
)
ENV_START = Histogram(
    "labserver_env_start_seconds",
    "Environment start time by phase (queue: waiting for admission; create: the engine's work)",
    ["phase"],
    buckets=_BUCKETS + (60.0, 120.0),
    registry=REGISTRY,
)
ENV_PROVISION = Histogram(
    "labserver_env_provision_seconds",
    "Provisioning an environment, from 'provisioning' to ready or failed (queue included)",
    ["backend", "outcome"],
    buckets=_BUCKETS + (60.0, 120.0, 300.0),
    registry=REGISTRY,
)
ENV_FAILURES = Counter(
    "labserver_env_provision_failures",
    "Environment starts that failed, by the backend's reason label",
    ["reason"],
    registry=REGISTRY,
)
ENV_QUEUE = Gauge("labserver_env_queue_length", "Environment starts waiting for admission", registry=REGISTRY)
CHECK_DURATION = Histogram(
    "labserver_check_duration_seconds",
    "Checker run time of a finished check, by lab, step and status",
    ["lab", "step", "status"],
    buckets=_CHECK_BUCKETS,
    registry=REGISTRY,
)
CHECK_QUEUE_WAIT = Histogram(
    "labserver_check_queue_wait_seconds",
    "Time a finished check waited for a check slot (fair queue), by lab, step and status",
    ["lab", "step", "status"],
    buckets=_BUCKETS + (60.0, 120.0, 300.0),
    registry=REGISTRY,
)
ENGINE_ERRORS = Counter(
    "labserver_engine_errors",
    "Container engine calls that raised, by backend and exception class",
    ["backend", "error"],
    registry=REGISTRY,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: the slot wait of the check running in this task, noted by the fair queue, read at the finish
_check_wait: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "labserver_check_wait", default=None
)


def note_check_wait(seconds: float) -> None:
    """The check in this task waited ``seconds`` for its slot (``services/grading/fair_queue.py``)."""
    _check_wait.set(max(0.0, seconds))


def check_finished(run: CheckRun) -> None:
    """Observe a finished check (its status, message and duration are set) once: duration and slot
    wait by lab, step and status, and one log line ``check finished`` carrying them."""
    wait = _check_wait.get()
    _check_wait.set(None)
    labels = (run.lab_id, run.step_id, str(run.status))
    CHECK_DURATION.labels(*labels).observe(max(0.0, run.duration_s))
    if wait is not None:
        CHECK_QUEUE_WAIT.labels(*labels).observe(wait)
    log.info(
        "check finished: %s/%s %s",
        run.lab_id,
        run.step_id,
        run.status,
        extra={
            "run_id": run.id,
            "lab": run.lab_id,
            "step": run.step_id,
            "status": str(run.status),
            "duration_s": round(run.duration_s, 3),
            "cpu_s": None if run.cpu_s is None else round(run.cpu_s, 3),
            "queue_wait_s": None if wait is None else round(wait, 3),
        },
    )


@dataclass(frozen=True)
class Snapshot:
    """What the server holds at a scrape: environments per (state, reason), terminal shells open
    and those with a viewer attached, SSE subscribers, checks waiting for a slot."""

    environments: Mapping[tuple[str, str], int] = field(default_factory=dict)
    terminals_open: int = 0
    terminals_attached: int = 0
    sse_clients: int = 0
    checks_waiting: int = 0
    live_published: Mapping[str, int] = field(default_factory=dict)  # live events by kind, so far
    live_delivered: int = 0
    live_encoded: int = 0


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.snapshot
        envs = GaugeMetricFamily(
            "labserver_environments",
            "Environments by state and failure reason (reason is empty unless the backend gave one)",
            labels=["state", "reason"],
        )
        for (state, reason), count in sorted(s.environments.items()):
            envs.add_metric([state, reason], count)
        yield envs
        yield GaugeMetricFamily("labserver_terminals_open", "Terminal shells open", value=s.terminals_open)
        yield GaugeMetricFamily(
            "labserver_terminals_attached",
            "Terminal shells with at least one browser attached (active terminals)",
            value=s.terminals_attached,
        )
        yield GaugeMetricFamily(
            "labserver_sse_clients",
            "Live (SSE) streams open: attendee pages and instructor grids",
            value=s.sse_clients,
        )
        yield GaugeMetricFamily(
            "labserver_checks_waiting", "Checks waiting for a check slot now", value=s.checks_waiting
        )
        published = CounterMetricFamily(
            "labserver_live_events", "Live events published, by kind", labels=["kind"]
        )
        for kind, count in sorted(s.live_published.items()):
            published.add_metric([kind], count)
        yield published
        yield CounterMetricFamily(
            "labserver_live_deliveries",
            "Live events handed to SSE streams (one event to three streams counts three)",
            value=s.live_delivered,
        )
        yield CounterMetricFamily(
            "labserver_live_encodes",
            "Live events encoded as JSON for attendee streams (once per event, however many streams)",
            value=s.live_encoded,
        )


def render(snapshot: Snapshot | None = None) -> bytes:
    """The exposition text: the process's metrics, then the ``snapshot``'s gauges when given."""
    text = generate_latest(REGISTRY)
    if snapshot is not None:
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(_SnapshotCollector(snapshot))
        text += generate_latest(scrape)
    return text


class TimedQueuePool(QueuePool):
    """A QueuePool that measures every checkout's wait (including making a new connection)."""

    def _do_get(self) -> Any:
        started = time.perf_counter()
        try:
            return super()._do_get()
        except PoolTimeout:
            DB_POOL_TIMEOUTS.inc()
            raise
        finally:
            DB_POOL_WAIT.observe(time.perf_counter() - started)


def env_provisioned(backend: str, seconds: float, *, failure: str = "") -> None:
    """A start ended: ready (``failure`` empty) or failed with that reason label."""
    ENV_PROVISION.labels(backend, "failed" if failure else "ready").observe(max(0.0, seconds))
    if failure:
        ENV_FAILURES.labels(failure).inc()
