"""events.warm_pool: ready environments kept for the event (NULL = LABSERVER_DOCKER__WARM_POOL)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 11:35:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("warm_pool", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("warm_pool")
