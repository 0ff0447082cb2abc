"""seats (personal join codes, stored hashed) and events.seats_only

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 14:05:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("seats_only", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "seats",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("event_id", sa.Integer(), sa.ForeignKey("events.id"), nullable=False),
        sa.Column("code_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("attendee_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    )
    op.create_index("ix_seats_event_id", "seats", ["event_id"])
    op.create_index("ix_seats_code_hash", "seats", ["code_hash"], unique=True)
    op.create_index("ix_seats_attendee_id", "seats", ["attendee_id"])


def downgrade() -> None:
    op.drop_table("seats")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("seats_only")
