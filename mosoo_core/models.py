"""Imports every table so SQLModel.metadata is complete (Alembic and tests use it)."""

from sqlmodel import SQLModel

from mosoo_core.agents import models as agent_models
from mosoo_core.files import models as file_models
from mosoo_core.identity import models as identity_models
from mosoo_core.mail import models as mail_models
from mosoo_core.sessions import models as session_models
from mosoo_core.usage import models as usage_models
from mosoo_core.vault import models as vault_models

metadata = SQLModel.metadata

__all__ = [
    "agent_models",
    "file_models",
    "identity_models",
    "mail_models",
    "metadata",
    "session_models",
    "usage_models",
    "vault_models",
]
