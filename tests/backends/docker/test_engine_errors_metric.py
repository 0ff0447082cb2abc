"""An engine call that raises is counted in ``labserver_engine_errors_total`` by its exception class
(``Engines.run``, the one path of every blocking SDK call). The engine is a closed port: nothing to
fake, a real connection refused."""

from __future__ import annotations

import asyncio
import socket

import pytest

from labserver.backends.docker.engines import Engines, nodes_from_settings
from labserver.config import DockerSettings
from labserver.observability import metrics


def test_an_engine_call_that_fails_is_counted_by_error_class() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = DockerSettings(hosts=[f"tcp://127.0.0.1:{port}"], engine_timeout_s=5)
    engines = Engines(cfg, nodes_from_settings(cfg), "lstest")
    labels = {"backend": "docker", "error": "ConnectionError"}

    def count() -> float:
        return metrics.REGISTRY.get_sample_value("labserver_engine_errors_total", labels) or 0.0

    before = count()
    try:
        with pytest.raises(Exception, match="(?i)connection"):
            asyncio.run(engines.run(engines.client("node1").info))
    finally:
        engines.close()
    assert count() == before + 1
