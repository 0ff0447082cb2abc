"""events.record_input (terminal recordings keep keystrokes too)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 16:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("record_input", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("record_input")
