"""usage records name their runtime; the daily usage rollup and which days it covers

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 21:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _text(name: str, length: int, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sqlmodel.sql.sqltypes.AutoString(length=length), nullable=nullable)


def _count(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.BigInteger(), nullable=False)


def upgrade() -> None:
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.add_column(_text("runtime", 32, nullable=True))
    # Earlier records: the runtime of the driver that served their run, else their Agent's.
    op.execute(
        "UPDATE usage_event SET runtime = (SELECT driver_instance.runtime FROM session_run"
        " JOIN driver_instance ON driver_instance.id = session_run.driver_instance_id"
        " WHERE session_run.id = usage_event.run_id) WHERE run_id IS NOT NULL"
    )
    op.execute(
        "UPDATE usage_event SET runtime = (SELECT agent.runtime FROM agent"
        " WHERE agent.id = usage_event.agent_id) WHERE runtime IS NULL AND agent_id IS NOT NULL"
    )
    op.create_table(
        "usage_daily",
        _text("id", 26),
        sa.Column("day", sa.Date(), nullable=False),
        _text("app_id", 26),
        _text("agent_id", 26),
        _text("provider", 32),
        _text("model", 200),
        _text("purpose", 16),
        _count("calls"),
        _count("input_tokens"),
        _count("cached_input_tokens"),
        _count("cache_creation_input_tokens"),
        _count("output_tokens"),
        _count("reasoning_tokens"),
        _count("cost_usd_micros"),
        _count("unpriced_calls"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "day", "app_id", "agent_id", "provider", "model", "purpose", name="uq_usage_daily_key"
        ),
    )
    with op.batch_alter_table("usage_daily", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_usage_daily_day"), ["day"], unique=False)
        batch_op.create_index(batch_op.f("ix_usage_daily_app_id"), ["app_id"], unique=False)
    op.create_table(
        "usage_rollup_day",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("computed_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("raw_pruned", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("day"),
    )


def downgrade() -> None:
    op.drop_table("usage_rollup_day")
    with op.batch_alter_table("usage_daily", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_usage_daily_app_id"))
        batch_op.drop_index(batch_op.f("ix_usage_daily_day"))
    op.drop_table("usage_daily")
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.drop_column("runtime")
