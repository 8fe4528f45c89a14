"""environment builds install into layer directories, with an egress grant while building

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # No build ever ran before this revision (packages were refused), so the rows are empty.
    with op.batch_alter_table("environment_build", schema=None) as batch_op:
        batch_op.alter_column(
            "image",
            new_column_name="layer",
            existing_type=sa.String(length=200),
            existing_nullable=False,
        )
        batch_op.add_column(
            sa.Column(
                "grant_hash",
                sqlmodel.sql.sqltypes.AutoString(length=64),
                nullable=False,
                server_default="",
            )
        )
        batch_op.add_column(
            sa.Column("heartbeat_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.create_index(
            batch_op.f("ix_environment_build_grant_hash"), ["grant_hash"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("environment_build", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_environment_build_grant_hash"))
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("grant_hash")
        batch_op.alter_column(
            "layer",
            new_column_name="image",
            existing_type=sa.String(length=200),
            existing_nullable=False,
        )
