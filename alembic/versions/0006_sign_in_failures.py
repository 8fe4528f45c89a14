"""sign-in failures: failed code verifications, throttled per address and per IP

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db


revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('sign_in_failure',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('email', sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
    sa.Column('ip', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('sign_in_failure', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sign_in_failure_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_sign_in_failure_email'), ['email'], unique=False)
        batch_op.create_index(batch_op.f('ix_sign_in_failure_ip'), ['ip'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('sign_in_failure', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sign_in_failure_ip'))
        batch_op.drop_index(batch_op.f('ix_sign_in_failure_email'))
        batch_op.drop_index(batch_op.f('ix_sign_in_failure_created_at'))
    op.drop_table('sign_in_failure')
