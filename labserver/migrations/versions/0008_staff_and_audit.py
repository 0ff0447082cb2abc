"""staff accounts, their grants, sessions and one-time sign-in links; the events' audit log (issue 33)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 19:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Text = sqlmodel.sql.sqltypes.AutoString
Time = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "staff",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", Text(length=80), nullable=False, unique=True),
        sa.Column("email", Text(length=200), nullable=False),
        sa.Column("password_hash", Text(length=200), nullable=False),
        sa.Column("oidc_subject", Text(length=300), nullable=False),
        sa.Column("created_at", Time(), nullable=False),
        sa.Column("removed_at", Time(), nullable=True),
    )
    op.create_index("ix_staff_email", "staff", ["email"])
    op.create_index("ix_staff_oidc_subject", "staff", ["oidc_subject"])
    op.create_table(
        "staff_roles",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("staff_id", sa.Integer(), sa.ForeignKey("staff.id"), nullable=False),
        sa.Column("event_id", sa.Integer(), sa.ForeignKey("events.id"), nullable=True),
        sa.Column("role", Text(length=16), nullable=False),
        sa.Column("source", Text(length=16), nullable=False),
        sa.Column("created_at", Time(), nullable=False),
    )
    op.create_index("ix_staff_roles_staff_id", "staff_roles", ["staff_id"])
    op.create_index("ix_staff_roles_event_id", "staff_roles", ["event_id"])
    for table in ("staff_sessions", "staff_links"):
        op.create_table(
            table,
            sa.Column("id", Text(length=64), primary_key=True),
            sa.Column("staff_id", sa.Integer(), sa.ForeignKey("staff.id"), nullable=False),
            *([sa.Column("via", Text(length=16), nullable=False)] if table == "staff_sessions" else []),
            sa.Column("created_at", Time(), nullable=False),
            sa.Column("expires_at", Time(), nullable=False),
            sa.Column("ended_at" if table == "staff_sessions" else "used_at", Time(), nullable=True),
        )
        op.create_index(f"ix_{table}_staff_id", table, ["staff_id"])
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("event_id", sa.Integer(), sa.ForeignKey("events.id"), nullable=False),
        sa.Column("at", Time(), nullable=False),
        sa.Column("actor", Text(length=80), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("role", Text(length=16), nullable=False),
        sa.Column("action", Text(length=32), nullable=False),
        sa.Column("target", Text(length=300), nullable=False),
        sa.Column("attendee_id", sa.Integer(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    op.create_index("ix_audit_log_event_id", "audit_log", ["event_id"])


def downgrade() -> None:
    for table in ("audit_log", "staff_links", "staff_sessions", "staff_roles", "staff"):
        op.drop_table(table)
