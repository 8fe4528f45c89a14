"""run marks (the moments of a run's life its diagnostics are timed from); a driver
instance keeps its version and how often it reconnected

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 21:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_mark",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("at", mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["session_run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "name", name="uq_run_mark_name"),
    )
    with op.batch_alter_table("run_mark", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_mark_run_id"), ["run_id"], unique=False)
    # Instances from before: their version was not kept, nor any reconnect.
    with op.batch_alter_table("driver_instance", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "driver_version",
                sqlmodel.sql.sqltypes.AutoString(length=64),
                nullable=False,
                server_default="",
            )
        )
        batch_op.add_column(
            sa.Column("reconnects", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("driver_instance", schema=None) as batch_op:
        batch_op.drop_column("reconnects")
        batch_op.drop_column("driver_version")
    with op.batch_alter_table("run_mark", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_mark_run_id"))
    op.drop_table("run_mark")
