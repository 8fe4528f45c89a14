"""environments: revisions, builds, the revision a thread froze; a default per App

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 11:54:41.372515
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import mosoo_core.db
from mosoo_core.clock import utcnow
from mosoo_core.ids import new_id


revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('environment_build',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('packages_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('packages', sa.JSON(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('image', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('log', sa.Text(), nullable=False),
    sa.Column('error', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('started_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('finished_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('packages_hash')
    )
    with op.batch_alter_table('environment_build', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_environment_build_status'), ['status'], unique=False)

    op.create_table('environment',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('app_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
    sa.Column('is_default', sa.Boolean(), nullable=False),
    sa.Column('current_revision', sa.Integer(), nullable=False),
    sa.Column('deleted_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['app.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('environment', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_environment_app_id'), ['app_id'], unique=False)
        batch_op.create_index('uq_environment_default', ['app_id'], unique=True, sqlite_where=sa.text('is_default AND deleted_at IS NULL'), postgresql_where=sa.text('is_default AND deleted_at IS NULL'))

    op.create_table('environment_revision',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('environment_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('app_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('summary', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.Column('packages', sa.JSON(), nullable=False),
    sa.Column('setup_script', sa.Text(), nullable=False),
    sa.Column('variables', sa.JSON(), nullable=False),
    sa.Column('network_policy', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('allowed_hosts', sa.JSON(), nullable=False),
    sa.Column('allow_package_indexes', sa.Boolean(), nullable=False),
    sa.Column('packages_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', mosoo_core.db.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['app.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['environment_id'], ['environment.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('environment_id', 'number', name='uq_environment_revision_number')
    )
    with op.batch_alter_table('environment_revision', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_environment_revision_app_id'), ['app_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_environment_revision_environment_id'), ['environment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_environment_revision_packages_hash'), ['packages_hash'], unique=False)

    with op.batch_alter_table('agent_session', schema=None) as batch_op:
        batch_op.add_column(sa.Column('environment_revision_id', sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True))
        batch_op.create_foreign_key('fk_agent_session_environment_revision_id', 'environment_revision', ['environment_revision_id'], ['id'], ondelete='SET NULL')

    with op.batch_alter_table('session_run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('setup_log', sa.Text(), nullable=False, server_default=''))

    _add_default_environments()


def _add_default_environments() -> None:
    """Every existing App gets its default environment (no packages, no network), as new
    Apps do when they are created."""
    bind = op.get_bind()
    apps = sa.table('app', sa.column('id', sa.String))
    environment = sa.table(
        'environment',
        *(sa.column(c) for c in ('id', 'app_id', 'name', 'is_default', 'current_revision')),
        sa.column('created_at', mosoo_core.db.UTCDateTime(timezone=True)),
        sa.column('updated_at', mosoo_core.db.UTCDateTime(timezone=True)),
    )
    revision = sa.table(
        'environment_revision',
        *(
            sa.column(c)
            for c in ('id', 'environment_id', 'app_id', 'number', 'summary', 'setup_script',
                      'network_policy', 'allow_package_indexes', 'packages_hash')
        ),
        sa.column('packages', sa.JSON),
        sa.column('variables', sa.JSON),
        sa.column('allowed_hosts', sa.JSON),
        sa.column('created_at', mosoo_core.db.UTCDateTime(timezone=True)),
    )
    now = utcnow()
    for (app_id,) in bind.execute(sa.select(apps.c.id)).all():
        environment_id = new_id()
        bind.execute(environment.insert().values(
            id=environment_id, app_id=app_id, name='Default', is_default=True,
            current_revision=1, created_at=now, updated_at=now,
        ))
        bind.execute(revision.insert().values(
            id=new_id(), environment_id=environment_id, app_id=app_id, number=1,
            summary='Created.', packages={'pip': [], 'npm': []}, setup_script='', variables=[],
            network_policy='none', allowed_hosts=[], allow_package_indexes=False,
            packages_hash='', created_at=now,
        ))


def downgrade() -> None:
    with op.batch_alter_table('session_run', schema=None) as batch_op:
        batch_op.drop_column('setup_log')

    with op.batch_alter_table('agent_session', schema=None) as batch_op:
        batch_op.drop_constraint('fk_agent_session_environment_revision_id', type_='foreignkey')
        batch_op.drop_column('environment_revision_id')

    with op.batch_alter_table('environment_revision', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_environment_revision_packages_hash'))
        batch_op.drop_index(batch_op.f('ix_environment_revision_environment_id'))
        batch_op.drop_index(batch_op.f('ix_environment_revision_app_id'))

    op.drop_table('environment_revision')
    with op.batch_alter_table('environment', schema=None) as batch_op:
        batch_op.drop_index('uq_environment_default', sqlite_where=sa.text('is_default AND deleted_at IS NULL'), postgresql_where=sa.text('is_default AND deleted_at IS NULL'))
        batch_op.drop_index(batch_op.f('ix_environment_app_id'))

    op.drop_table('environment')
    with op.batch_alter_table('environment_build', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_environment_build_status'))

    op.drop_table('environment_build')
