"""check_runs.tables: the tables a checker's verdict carries (plain-text cells)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("check_runs") as batch:
        batch.add_column(sa.Column("tables", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("check_runs") as batch:
        batch.drop_column("tables")
