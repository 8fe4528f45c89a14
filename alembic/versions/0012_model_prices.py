"""model prices (global from the seed file, or an App's own) and priced usage records

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, mosoo_core.db.UTCDateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "model_price",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("app_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True),
        sa.Column("provider", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("model_pattern", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("input_micros_per_million", sa.Integer(), nullable=False),
        sa.Column("cached_input_micros_per_million", sa.Integer(), nullable=True),
        sa.Column("cache_write_micros_per_million", sa.Integer(), nullable=True),
        sa.Column("output_micros_per_million", sa.Integer(), nullable=False),
        sa.Column("reasoning_micros_per_million", sa.Integer(), nullable=True),
        _time("effective_from"),
        sa.Column("read_on", sa.Date(), nullable=True),
        _time("created_at"),
        sa.ForeignKeyConstraint(["app_id"], ["app.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_price", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_model_price_app_id"), ["app_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_model_price_provider"), ["provider"], unique=False)
    # Records written before pricing cost 0 and said so with cost_known = false: unpriced.
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("unpriced", sa.Boolean(), nullable=False, server_default=sa.true())
        )
    op.execute("UPDATE usage_event SET unpriced = NOT cost_known")
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.drop_column("cost_known")


def downgrade() -> None:
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("cost_known", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute("UPDATE usage_event SET cost_known = NOT unpriced")
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.drop_column("unpriced")
    with op.batch_alter_table("model_price", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_model_price_provider"))
        batch_op.drop_index(batch_op.f("ix_model_price_app_id"))
    op.drop_table("model_price")
