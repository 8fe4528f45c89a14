"""Who owns what: the App, Agent and thread lookups every service and front door shares.

Each returns the row when it belongs to the account and raises NotFound otherwise: another
owner's id is indistinguishable from one that does not exist. This module reads tables only
and imports no service, so any service can use it without a package cycle.
"""

from __future__ import annotations

from sqlmodel import Session, select

from mosoo_core.errors import NotFound
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.identity import App, Organization
from mosoo_core.tables.sessions import AgentSession


def organization_of(db: Session, account_id: str) -> Organization:
    organization = db.exec(
        select(Organization).where(Organization.owner_account_id == account_id)
    ).first()
    if organization is None:
        raise NotFound("Organization not found.")
    return organization


def owned_app(db: Session, account_id: str, app_id: str) -> App:
    organization = organization_of(db, account_id)
    app = db.get(App, app_id) if app_id else None
    if app is None or app.organization_id != organization.id:
        raise NotFound("App not found.")
    return app


def owned_agent(db: Session, account_id: str, app_id: str, agent_id: str) -> Agent:
    owned_app(db, account_id, app_id)
    agent = db.get(Agent, agent_id) if agent_id else None
    if agent is None or agent.app_id != app_id:
        raise NotFound("Agent not found.")
    return agent


def owned_thread(db: Session, account_id: str, thread_id: str) -> AgentSession:
    """The thread if its App belongs to the account."""
    row = db.get(AgentSession, thread_id) if thread_id else None
    if row is None:
        raise NotFound("Thread not found.")
    try:
        owned_app(db, account_id, row.app_id)
    except NotFound:
        raise NotFound("Thread not found.") from None
    return row
