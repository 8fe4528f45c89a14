"""Imports every table so SQLModel.metadata is complete (Alembic and tests use it)."""

from sqlmodel import SQLModel

from mosoo_core.identity import models as identity_models
from mosoo_core.mail import models as mail_models

metadata = SQLModel.metadata

__all__ = ["identity_models", "mail_models", "metadata"]
