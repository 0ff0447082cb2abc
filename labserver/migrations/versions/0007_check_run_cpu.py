"""check_runs.cpu_s: the CPU seconds a check cost (reported by its checker, or measured)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("check_runs") as batch:
        batch.add_column(sa.Column("cpu_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("check_runs") as batch:
        batch.drop_column("cpu_s")
