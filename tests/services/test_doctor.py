"""``labserver doctor`` tells an operator what would stop a room, and what to do, in English and
Chinese: with the Docker engine missing, with a full disk (a small tmpfs mounted for the test),
with a database that refuses connections (a closed port), with the port taken, and with migrations
behind or ahead of this code. Exit status 1 exactly when the server would not serve a room."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from labserver import db
from labserver.cli.doctor import warn_at_start
from labserver.cli.main import app as cli
from labserver.config import DockerSettings, Settings
from labserver.services.operations.doctor import FIXES, Report, Status, diagnose
from tests.conftest import REPO


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def settings_in(folder: Path, **extra: object) -> Settings:
    return Settings(data_dir=folder / "data", labs_dir=REPO / "labs", **extra)  # type: ignore[arg-type]


def the(report: Report, check: str):  # type: ignore[no-untyped-def]
    found = report.of(check)
    assert found, f"no {check} finding in {report.findings}"
    return found[0]


def run_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["doctor", "--port", str(closed_port()), *args], env=env)
    return result.exit_code, result.output


def test_a_missing_engine_fails_with_what_to_do(tmp_path: Path) -> None:
    hosts = [f"unix://{tmp_path}/no-docker.sock", f"tcp://127.0.0.1:{closed_port()}"]
    report = diagnose(settings_in(tmp_path, backend="docker", docker=DockerSettings(hosts=hosts)), port=None)
    engines = report.of("engine")
    assert [f.status for f in engines] == [Status.fail, Status.fail] and not report.ok
    assert "does not answer" in engines[0].detail and "connection refused" in engines[1].detail
    assert "systemctl start docker" in engines[0].fix_text("en") and "启动" in engines[0].fix_text("zh")
    assert not report.of("images")  # nothing to ask an engine that did not answer
    code, out = run_cli(
        {
            "LABSERVER_BACKEND": "docker",
            "LABSERVER_DOCKER__HOSTS": f'["{hosts[0]}"]',
            "LABSERVER_DATA_DIR": str(tmp_path / "data"),
            "LABSERVER_LABS_DIR": str(REPO / "labs"),
        }
    )
    assert code == 1, out
    assert "FAIL  engine" in out and "fix: Start the Docker engine" in out and "修复: 启动" in out


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "2m") -> Iterator[Path]:
    where.mkdir()
    # nothing is skipped: a run that cannot mount fails here, saying why (CI runs as root)
    assert os.geteuid() == 0, "mounting a tmpfs for the full-disk case needs root (CI runs as root)"
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    assert res.returncode == 0, f"cannot mount a tmpfs here: {res.stderr.decode().strip()}"
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_fails_and_says_where(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small") as disk:
        data = disk / "data"
        data.mkdir()
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as out:  # fill it to the last block
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        report = diagnose(Settings(data_dir=data, labs_dir=REPO / "labs"), port=None)
        finding = the(report, "disk")
        assert finding.status == Status.fail and not report.ok
        assert "writing there fails" in finding.detail and str(data) in finding.fix_text("en")
        assert str(data) in finding.fix_text("zh")
        code, out = run_cli({"LABSERVER_DATA_DIR": str(data), "LABSERVER_LABS_DIR": str(REPO / "labs")})
        assert code == 1 and "FAIL  disk" in out, out
        assert not list(data.iterdir())  # the probe left nothing behind


def test_a_database_that_refuses_connections_fails(tmp_path: Path) -> None:
    url = f"postgresql://labserver:s3cret@127.0.0.1:{closed_port()}/postgres"
    report = diagnose(settings_in(tmp_path, database_url=url), port=None)
    finding = the(report, "database")
    assert finding.status == Status.fail and not report.ok
    assert "refused" in finding.detail.lower() and "s3cret" not in finding.detail  # the password is hidden
    assert "LABSERVER_DATABASE_URL" in finding.fix_text("en") and "数据库" in finding.fix_text("zh")
    code, out = run_cli(
        {
            "LABSERVER_DATABASE_URL": url,
            "LABSERVER_DATA_DIR": str(tmp_path / "data"),
            "LABSERVER_LABS_DIR": str(REPO / "labs"),
        }
    )
    assert code == 1 and "FAIL  database" in out and "s3cret" not in out, out


def test_a_healthy_folder_passes_disk_database_and_port_and_a_taken_port_fails(tmp_path: Path) -> None:
    report = diagnose(settings_in(tmp_path), port=closed_port())
    for check in ("disk", "database", "port", "labs"):
        assert the(report, check).status == Status.ok, report.of(check)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finding = the(diagnose(settings_in(tmp_path), port=port), "port")
    assert finding.status == Status.fail and f"127.0.0.1:{port}" in finding.fix_text("zh")


def test_migrations_behind_warn_and_a_newer_database_fails(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    settings.data_dir.mkdir(parents=True)
    engine = db.make_engine(settings.sqlalchemy_url)
    db.upgrade(engine, "0002")
    behind = the(diagnose(settings, port=None), "migrations")
    assert behind.status == Status.warn and "0002" in behind.detail
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    report = diagnose(settings, port=None)
    assert the(report, "migrations").status == Status.fail and not report.ok


def test_serve_start_prints_the_problems_as_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"postgresql://u:p@127.0.0.1:{closed_port()}/x"
    report = warn_at_start(settings_in(tmp_path, database_url=url), "127.0.0.1", closed_port())
    err = capsys.readouterr().err
    assert not report.ok and "FAIL  database" in err and "修复" in err and "labserver doctor" in err


def test_every_fix_has_both_languages_with_the_same_fields() -> None:
    for key, (en, zh) in FIXES.items():
        assert en.strip() and re.search(r"[\u4e00-\u9fff]", zh), key
        assert set(re.findall(r"\{(\w+)\}", en)) == set(re.findall(r"\{(\w+)\}", zh)), key


def test_the_servers_own_database_is_reachable_at_head(settings: Settings) -> None:
    """On SQLite, and on PostgreSQL with LABSERVER_TEST_DATABASE_URL (where the clock is compared)."""
    db.upgrade(db.make_engine(settings.sqlalchemy_url))
    report = diagnose(settings, port=None)
    assert the(report, "database").status == Status.ok, report.of("database")
    assert the(report, "migrations").status == Status.ok and "at head" in the(report, "migrations").detail
    clock = the(report, "clock")
    assert clock.status in (Status.ok, Status.warn)
    assert clock.detail.startswith("SQLite") != settings.sqlalchemy_url.startswith("postgresql")


def test_a_kubernetes_api_server_that_does_not_answer_fails(tmp_path: Path) -> None:
    from labserver.config import KubernetesSettings

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{closed_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    settings = settings_in(
        tmp_path, backend="kubernetes", kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
    )
    report = diagnose(settings, port=None)
    finding = the(report, "engine")
    assert finding.status == Status.fail and "does not answer" in finding.detail and not report.ok
    assert "Kubernetes API" in finding.fix_text("en") and "无应答" in finding.fix_text("zh")
