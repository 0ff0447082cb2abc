"""Migration 0008 (staff, staff_roles, staff_sessions, staff_links, audit_log): up from 0007, down,
and up again on the test database (SQLite, or PostgreSQL with ``LABSERVER_TEST_DATABASE_URL``),
and the tables it makes are the models' (same columns, same nullability)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from labserver import db
from labserver.models import AuditEntry, Staff, StaffLink, StaffRole, StaffSession

TABLES = {m.__tablename__: m for m in (Staff, StaffRole, StaffSession, StaffLink, AuditEntry)}  # type: ignore[attr-defined]


def test_0008_goes_up_down_and_up_and_matches_the_models(tmp_path: Path, database_url: str) -> None:
    engine = db.make_engine(database_url or f"sqlite:///{tmp_path / 'm.db'}")
    db.upgrade(engine, "0007")
    assert not set(TABLES) & set(sa.inspect(engine).get_table_names())
    db.upgrade(engine)
    inspector = sa.inspect(engine)
    for name, model in TABLES.items():
        columns = {c["name"]: c["nullable"] for c in inspector.get_columns(name)}
        expected = {c.name: c.nullable for c in model.__table__.columns}  # type: ignore[attr-defined]
        assert columns == expected, name
    from alembic import command

    command.downgrade(db.alembic_config(engine), "0007")
    assert not set(TABLES) & set(sa.inspect(engine).get_table_names())
    db.upgrade(engine)
    assert set(TABLES) <= set(sa.inspect(engine).get_table_names())
    engine.dispose()
