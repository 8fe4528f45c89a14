"""pet operations: what was done to an Assistant's sandbox (restart, recreate, reset,
hibernate, wake), by whom and how it went, for the Agent's Logs

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 00:15:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pet_operation",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("agent_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("account_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("operation", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("created_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["agent_id"], ["agent.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("pet_operation", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pet_operation_agent_id"), ["agent_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_pet_operation_created_at"), ["created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("pet_operation", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pet_operation_created_at"))
        batch_op.drop_index(batch_op.f("ix_pet_operation_agent_id"))
    op.drop_table("pet_operation")
