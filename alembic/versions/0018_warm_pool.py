"""warm pool: the kinds of Task sandbox kept warm per host (pool_key, with hits and misses),
the members standing by (pool_member), and when a member's driver stood by
(driver_instance.standby_at)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 07:55:19
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pool_key",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("app_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("runtime", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("image", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("revision_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("network_policy", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("layer", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("skill_versions", sa.JSON(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("misses", sa.Integer(), nullable=False),
        sa.Column("last_wanted_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["app_id"], ["app.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("host", "digest", name="uq_pool_key_host_digest"),
    )
    with op.batch_alter_table("pool_key", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pool_key_app_id"), ["app_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_pool_key_host"), ["host"], unique=False)

    op.create_table(
        "pool_member",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("key_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column(
            "driver_instance_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False
        ),
        sa.Column("sandbox_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("sandbox_name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True),
        sa.Column("image", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("created_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["key_id"], ["pool_key.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("driver_instance_id"),
    )
    with op.batch_alter_table("pool_member", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pool_member_host"), ["host"], unique=False)
        batch_op.create_index(batch_op.f("ix_pool_member_key_id"), ["key_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_pool_member_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_pool_member_status"), ["status"], unique=False)

    with op.batch_alter_table("driver_instance", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("standby_at", mosoo_core.db.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("driver_instance", schema=None) as batch_op:
        batch_op.drop_column("standby_at")

    with op.batch_alter_table("pool_member", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pool_member_status"))
        batch_op.drop_index(batch_op.f("ix_pool_member_run_id"))
        batch_op.drop_index(batch_op.f("ix_pool_member_key_id"))
        batch_op.drop_index(batch_op.f("ix_pool_member_host"))

    op.drop_table("pool_member")
    with op.batch_alter_table("pool_key", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pool_key_host"))
        batch_op.drop_index(batch_op.f("ix_pool_key_app_id"))

    op.drop_table("pool_key")
