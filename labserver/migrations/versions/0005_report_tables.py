"""hint_opens (the post-event report) and check_files (digests in completion records)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 16:30:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hint_opens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("event_id", sa.Integer(), sa.ForeignKey("events.id"), nullable=False),
        sa.Column("attendee_id", sa.Integer(), sa.ForeignKey("attendees.id"), nullable=False),
        sa.Column("lab_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("step_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("opened_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.UniqueConstraint("attendee_id", "lab_id", "step_id"),
    )
    op.create_index("ix_hint_opens_event_id", "hint_opens", ["event_id"])
    op.create_index("ix_hint_opens_attendee_id", "hint_opens", ["attendee_id"])
    op.create_table(
        "check_files",
        sa.Column("run_id", sa.Integer(), primary_key=True),  # no foreign key: see models.CheckFiles
        sa.Column("files", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("check_files")
    op.drop_table("hint_opens")
