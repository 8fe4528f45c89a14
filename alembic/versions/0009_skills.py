"""skills and their immutable versions

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 15:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('skill',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('app_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('latest_version', sa.Integer(), nullable=False),
    sa.Column('deleted_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['app.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('skill', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_skill_app_id'), ['app_id'], unique=False)
        # A name is taken once per App among live skills; an uninstalled one frees it.
        batch_op.create_index('uq_skill_live_name', ['app_id', 'name'], unique=True, sqlite_where=sa.text('deleted_at IS NULL'), postgresql_where=sa.text('deleted_at IS NULL'))

    op.create_table('skill_version',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('skill_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('app_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
    sa.Column('description', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
    sa.Column('license', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.Column('compatibility', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.Column('skill_metadata', sa.JSON(), nullable=False),
    sa.Column('allowed_tools', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
    sa.Column('skill_md', sa.Text(), nullable=False),
    sa.Column('files', sa.JSON(), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('content_sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('object_key', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('archive_size', sa.Integer(), nullable=False),
    sa.Column('created_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['app.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['skill_id'], ['skill.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('skill_id', 'number', name='uq_skill_version_number')
    )
    with op.batch_alter_table('skill_version', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_skill_version_app_id'), ['app_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_skill_version_content_sha256'), ['content_sha256'], unique=False)
        batch_op.create_index(batch_op.f('ix_skill_version_skill_id'), ['skill_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('skill_version', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_skill_version_skill_id'))
        batch_op.drop_index(batch_op.f('ix_skill_version_content_sha256'))
        batch_op.drop_index(batch_op.f('ix_skill_version_app_id'))

    op.drop_table('skill_version')
    with op.batch_alter_table('skill', schema=None) as batch_op:
        batch_op.drop_index('uq_skill_live_name', sqlite_where=sa.text('deleted_at IS NULL'), postgresql_where=sa.text('deleted_at IS NULL'))
        batch_op.drop_index(batch_op.f('ix_skill_app_id'))

    op.drop_table('skill')
