"""Every table of Mosoo, one module per domain, below every service.

Services of any package read the tables they need from here, so no package has to import
another's service for a query and no cycle hides behind a function-level import. Importing any
table module imports them all (this file), so SQLModel.metadata is always complete: foreign keys
between domains resolve, and Alembic and tests use `metadata`.

Naming: the `agent_session` table (class `AgentSession`) is a *thread* in the product's
vocabulary; the table keeps its first name.
"""

from sqlmodel import SQLModel

from mosoo_core.tables import (
    agents,
    environments,
    files,
    identity,
    mail,
    mcp,
    pets,
    pool,
    sessions,
    skills,
    usage,
    vault,
)

metadata = SQLModel.metadata

__all__ = [
    "agents",
    "environments",
    "files",
    "identity",
    "mail",
    "mcp",
    "metadata",
    "pets",
    "pool",
    "sessions",
    "skills",
    "usage",
    "vault",
]
