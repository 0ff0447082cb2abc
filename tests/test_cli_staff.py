"""``labserver staff``: add prints a one-time link (or a password) once and stores only hashes,
link makes a new one, list shows roles, remove ends the person; bad input says what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlmodel import Session, select
from typer.testing import CliRunner

from labserver import db
from labserver.cli.main import app as cli
from labserver.models import AuditEntry, Staff, StaffLink
from labserver.services.joining.events import create_event
from labserver.services.staff import accounts


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LABSERVER_DATA_DIR", str(tmp_path / "data"))
    engine = db.make_engine(f"sqlite:///{tmp_path / 'data' / 'labserver.db'}")
    db.upgrade(engine)
    with Session(engine) as session:
        create_event(session, title="Meetup", labs=["getting-started"], code="MEETUP")
    engine.dispose()
    return tmp_path / "data"


def test_staff_add_link_list_remove(data: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(
        cli,
        [
            "staff",
            "add",
            "Sam",
            "--role",
            "assistant",
            "--event",
            "meetup",
            "--url",
            "https://labs.example.org",
        ],
    )
    assert out.exit_code == 0, out.output
    link = re.search(r"https://labs\.example\.org/instructor/signin/(\S+)", out.output)
    assert link and "assistant on event meetup" in out.output
    pw = runner.invoke(cli, ["staff", "add", "Olga", "--role", "organiser", "--password"])
    password = re.search(r"password \(shown once\): (\S+)", pw.output)
    assert pw.exit_code == 0 and password
    engine = db.make_engine(f"sqlite:///{data / 'labserver.db'}")
    with Session(engine) as session:
        olga = session.exec(select(Staff).where(Staff.name == "Olga")).one()
        assert password.group(1) not in olga.password_hash and olga.password_hash.startswith("scrypt$")
        assert session.get(StaffLink, accounts.digest(link.group(1))) is not None  # only the hash
        staff, secret = accounts.sign_in_with_link(session, link.group(1), hours=1)
        assert staff.name == "Sam" and accounts.principal_of(session, secret) is not None
    listed = runner.invoke(cli, ["staff", "list"])
    assert "assistant@" in listed.output and "organiser@every event" in listed.output
    assert runner.invoke(cli, ["staff", "link", "Sam"]).exit_code == 0
    assert runner.invoke(cli, ["staff", "remove", "Sam"]).exit_code == 0
    with Session(engine) as session:
        assert accounts.principal_of(session, secret) is None
        actions = [(r.actor, r.detail["change"]) for r in session.exec(select(AuditEntry)).all()]
    assert actions == [("operator (labserver staff)", "added"), ("operator (labserver staff)", "removed")]
    engine.dispose()


def test_staff_add_says_what_is_wrong(data: Path) -> None:
    runner = CliRunner()
    bad_role = runner.invoke(cli, ["staff", "add", "X", "--role", "boss"])
    assert bad_role.exit_code == 2 and "organiser, instructor or assistant" in bad_role.output
    bad_event = runner.invoke(cli, ["staff", "add", "X", "--event", "NOPE"])
    assert bad_event.exit_code == 2 and "no event with the join code" in bad_event.output
    assert runner.invoke(cli, ["staff", "remove", "Nobody"]).exit_code == 2
