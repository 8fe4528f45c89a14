"""session_event: drop ix_session_event_session_id, which the unique (session_id, seq) index
already covers (its leading column); one B-tree fewer for every event stored

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 04:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("session_event", schema=None) as batch_op:
        batch_op.drop_index("ix_session_event_session_id")


def downgrade() -> None:
    with op.batch_alter_table("session_event", schema=None) as batch_op:
        batch_op.create_index("ix_session_event_session_id", ["session_id"], unique=False)
