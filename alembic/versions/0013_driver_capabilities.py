"""a driver instance keeps the capabilities its backend reported in hello

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-09 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Instances that said hello before this revision reported nothing we kept: an empty list,
    # which the console reads as "use the catalog".
    with op.batch_alter_table("driver_instance", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("capabilities", sa.JSON(), nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("driver_instance", schema=None) as batch_op:
        batch_op.drop_column("capabilities")
