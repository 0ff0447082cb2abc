"""``GET /metrics`` scraped as Prometheus does: the exposition text parses
(``prometheus_client.parser``), every metric family has help text, the figures move after a join
and a real check, and only an instructor, a scraper's token or a configured network may read it."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from labserver.app import create_app
from labserver.config import MetricsSettings, Settings
from labserver.models import Event
from tests.conftest import instructor_headers, join, settle

LAB = "/api/v1/labs/getting-started"
FAMILIES = {
    "labserver_http_request_duration_seconds",
    "labserver_db_pool_wait_seconds",
    "labserver_env_start_seconds",
    "labserver_env_provision_seconds",
    "labserver_env_provision_failures",
    "labserver_env_queue_length",
    "labserver_check_duration_seconds",
    "labserver_check_queue_wait_seconds",
    "labserver_engine_errors",
    "labserver_environments",
    "labserver_terminals_open",
    "labserver_terminals_attached",
    "labserver_sse_clients",
    "labserver_checks_waiting",
    "labserver_live_events",
    "labserver_live_deliveries",
    "labserver_live_encodes",
}


def scrape(client: TestClient) -> dict[str, float]:
    """Every sample as ``name{label="value",...}`` -> value; asserts each family has help text."""
    resp = client.get("/metrics", headers=instructor_headers())
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    samples: dict[str, float] = {}
    seen = set()
    for family in text_string_to_metric_families(resp.text):
        seen.add(family.name)
        assert family.documentation.strip(), f"{family.name} has no help text"
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    assert seen >= FAMILIES, f"missing families: {FAMILIES - seen}"
    return samples


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in samples.items() if k.split("{")[0] == name and all(w in k for w in want))


def test_metrics_parse_with_help_and_move_after_a_join_and_a_check(
    app: object, client: TestClient, event: Event
) -> None:
    before = scrape(client)
    ada = join(client, "Ada")
    settle(app)  # type: ignore[arg-type]
    run = client.post(f"{LAB}/steps/write-file/check", headers=ada).json()
    assert run["status"] == "failed"
    after = scrape(client)
    join_route = dict(route="/api/v1/join", method="POST", status="200")
    assert total(after, "labserver_http_request_duration_seconds_count", **join_route) == (
        total(before, "labserver_http_request_duration_seconds_count", **join_route) + 1
    )
    check = dict(lab="getting-started", step="write-file", status="failed")
    assert total(after, "labserver_check_duration_seconds_count", **check) == (
        total(before, "labserver_check_duration_seconds_count", **check) + 1
    )
    assert total(after, "labserver_check_queue_wait_seconds_count", **check) == (
        total(before, "labserver_check_queue_wait_seconds_count", **check) + 1
    )
    assert total(after, "labserver_environments", state="ready") == 1
    assert total(after, "labserver_env_provision_seconds_count", outcome="ready") == (
        total(before, "labserver_env_provision_seconds_count", outcome="ready") + 1
    )
    # the route label is the template, never the path the client sent
    client.get("/api/v1/labs/no-such-lab", headers=ada)
    client.get("/no/such/page/" + "x" * 50)
    labels = " ".join(scrape(client))
    assert "/api/v1/labs/{lab_id}" in labels and "no-such-lab" not in labels and "xxxx" not in labels
    assert 'route="unmatched"' in labels


def test_a_request_id_comes_back_and_a_hostile_one_is_replaced(client: TestClient, event: Event) -> None:
    assert client.get("/healthz", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == "abc-123"
    replaced = client.get("/healthz", headers={"X-Request-ID": 'a b"}{'}).headers["x-request-id"]
    assert replaced and replaced != 'a b"}{'


def test_only_instructors_scrapers_and_configured_networks_read_metrics(tmp_path: Path) -> None:
    base = dict(data_dir=tmp_path / "d", instructor_token="instr-token")
    with TestClient(create_app(Settings(**base, metrics=MetricsSettings(token="scrape-me")))) as c:
        assert c.get("/metrics").status_code == 403
        assert c.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert c.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).status_code == 200
        assert c.get("/metrics", headers={"Authorization": "Bearer instr-token"}).status_code == 200
    # the test client's peer address is "testclient": not an IP, never in a network
    nets = MetricsSettings(networks=["0.0.0.0/0", "::/0"])
    with TestClient(create_app(Settings(**base, metrics=nets)), client=("10.1.2.3", 5000)) as c:
        assert c.get("/metrics").status_code == 200
    with TestClient(
        create_app(Settings(**base, metrics=MetricsSettings(networks=["192.168.0.0/16"]))),
        client=("10.1.2.3", 5000),
    ) as c:
        assert c.get("/metrics").status_code == 403


def test_the_sample_dashboard_asks_only_for_metrics_the_server_exposes(client: TestClient) -> None:
    import json
    import re

    from tests.conftest import REPO

    text = client.get("/metrics", headers=instructor_headers()).text
    families = {f.name for f in text_string_to_metric_families(text)}
    dashboard = json.loads((REPO / "provisioning" / "grafana" / "labserver-dashboard.json").read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\blabserver_[a-z_]+", target["expr"])
    }
    assert asked, "the dashboard asks for nothing"
    unknown = {n for n in asked if re.sub(r"_(bucket|count|sum|total)$", "", n) not in families}
    assert not unknown, f"the dashboard asks for metrics the server does not expose: {unknown}"


def test_thirty_at_once_joins_and_scrapes_on_a_pool_of_two(tmp_path: Path, database_url: str) -> None:
    import threading

    from sqlmodel import Session

    from labserver.config import DatabaseSettings
    from labserver.services.joining.events import create_event
    from tests.conftest import EVENT_CODE, INSTRUCTOR_TOKEN, REPO

    settings = Settings(
        data_dir=tmp_path / "data",
        labs_dir=REPO / "labs",
        instructor_token=INSTRUCTOR_TOKEN,
        database_url=database_url,
        db=DatabaseSettings(pool_size=1, max_overflow=1, pool_timeout_s=60),
    )
    app = create_app(settings)
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        create_event(session, title="t", labs=["getting-started"], code=EVENT_CODE)
    codes: list[int] = []
    with TestClient(app) as client:

        def joiner(n: int) -> None:
            resp = client.post("/api/v1/join", json={"event_code": EVENT_CODE, "name": f"p{n}"})
            codes.append(resp.status_code)

        def scraper() -> None:
            codes.append(client.get("/metrics", headers=instructor_headers()).status_code)

        threads = [threading.Thread(target=joiner, args=(n,)) for n in range(15)]
        threads += [threading.Thread(target=scraper) for _ in range(15)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert codes.count(200) == 30, codes
        settle(app)
        samples = scrape(client)
        assert sum(v for k, v in samples.items() if k.startswith("labserver_environments{")) == 15
        assert app.state.ctx.engine.pool.checkedout() == 0
