"""MCP servers of an App and their credentials

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 15:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False)


def _secret(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True)


def _time(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, mosoo_core.db.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "mcp_server",
        _id("id"),
        _id("app_id"),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("description", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("url", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("auth_kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        _secret("credential_secret_id"),
        sa.Column("header_names", sa.JSON(), nullable=False),
        sa.Column("oauth", sa.JSON(), nullable=False),
        _secret("oauth_client_secret_id"),
        _secret("oauth_token_secret_id"),
        _time("oauth_connected_at", nullable=True),
        sa.Column("tools", sa.JSON(), nullable=False),
        sa.Column("server_info", sa.JSON(), nullable=False),
        _time("tested_at", nullable=True),
        sa.Column("test_ok", sa.Boolean(), nullable=True),
        sa.Column("test_error", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=False),
        _time("created_at"),
        _time("updated_at"),
        sa.ForeignKeyConstraint(["app_id"], ["app.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["credential_secret_id"], ["vault_secret.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["oauth_client_secret_id"], ["vault_secret.id"], ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["oauth_token_secret_id"], ["vault_secret.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("app_id", "name", name="uq_mcp_server_name"),
    )
    with op.batch_alter_table("mcp_server", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_mcp_server_app_id"), ["app_id"], unique=False)

    op.create_table(
        "mcp_oauth_state",
        _id("id"),
        sa.Column("state_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        _id("server_id"),
        _id("account_id"),
        sa.Column("code_verifier", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("redirect_uri", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        _time("expires_at"),
        _time("created_at"),
        sa.ForeignKeyConstraint(["server_id"], ["mcp_server.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("state_hash"),
    )
    with op.batch_alter_table("mcp_oauth_state", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_mcp_oauth_state_server_id"), ["server_id"], unique=False
        )

    op.create_table(
        "mcp_grant",
        _id("id"),
        sa.Column("token_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        _id("run_id"),
        _id("server_id"),
        _id("app_id"),
        _time("expires_at"),
        _time("created_at"),
        sa.ForeignKeyConstraint(["run_id"], ["session_run.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["server_id"], ["mcp_server.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("mcp_grant", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_mcp_grant_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_mcp_grant_server_id"), ["server_id"], unique=False)

    # The tool policies of each bound server, with the bindings already there.
    with op.batch_alter_table("agent", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("mcp_policies", sa.JSON(), server_default="{}", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("agent", schema=None) as batch_op:
        batch_op.drop_column("mcp_policies")
    with op.batch_alter_table("mcp_grant", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_mcp_grant_server_id"))
        batch_op.drop_index(batch_op.f("ix_mcp_grant_run_id"))
    op.drop_table("mcp_grant")
    with op.batch_alter_table("mcp_oauth_state", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_mcp_oauth_state_server_id"))
    op.drop_table("mcp_oauth_state")
    with op.batch_alter_table("mcp_server", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_mcp_server_app_id"))
    op.drop_table("mcp_server")
