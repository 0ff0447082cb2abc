"""In-process metrics, published at the instructor-only ``GET /metrics`` in Prometheus text format.

- ``labserver_db_pool_wait_seconds`` (histogram): how long each database connection checkout waited
  for the pool (:class:`TimedQueuePool`, the pool class :func:`labserver.db.make_engine` uses). A
  growing tail means something holds connections across slow work, or the pool is too small.
- ``labserver_db_pool_timeouts_total``: checkouts that gave up after ``LABSERVER_DB__POOL_TIMEOUT_S``.
- ``labserver_env_start_seconds`` (histogram, ``phase`` = queue | create): time environments spent
  waiting for admission, and being created/started by the engine (services/admission.py).
- ``labserver_env_queue_length`` (gauge): environment starts waiting for admission now.

One registry per process (the metrics describe the process, as the pool they watch does)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool

REGISTRY = CollectorRegistry(auto_describe=True)
_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

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
ENV_QUEUE = Gauge("labserver_env_queue_length", "Environment starts waiting for admission", registry=REGISTRY)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render() -> bytes:
    return generate_latest(REGISTRY)


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
