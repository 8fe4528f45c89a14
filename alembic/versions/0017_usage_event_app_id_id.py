"""usage_event (app_id, id): the CSV export's keyset pages seek instead of sorting the App's
every record per page

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 00:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.create_index("ix_usage_event_app_id_id", ["app_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("usage_event", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_event_app_id_id")
