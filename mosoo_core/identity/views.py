"""The plain shapes the identity services return."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class AccountView:
    id: str
    email: str
    name: str
    organization_id: str
    organization_name: str


@dataclass(frozen=True)
class AppView:
    id: str
    name: str
    organization_id: str
    created_at: datetime


@dataclass(frozen=True)
class OrganizationView:
    id: str
    name: str
    created_at: datetime
