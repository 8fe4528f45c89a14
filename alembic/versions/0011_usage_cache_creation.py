"""usage records count the prompt tokens written to the provider's cache (Anthropic)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Calls recorded before this revision wrote nothing to a cache that we know of: 0.
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "cache_creation_input_tokens", sa.Integer(), nullable=False, server_default="0"
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.drop_column("cache_creation_input_tokens")
