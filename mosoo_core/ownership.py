"""Who owns what: the App, Agent and thread lookups every service and front door shares.

Each returns the row when it belongs to the account and raises NotFound otherwise: another
owner's id is indistinguishable from one that does not exist. This module reads tables only
and imports no service, so any service can use it without a package cycle.
"""

from __future__ import annotations

from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import bindparam
from sqlmodel import Session, select

from mosoo_core.db import Connectable
from mosoo_core.errors import NotFound
from mosoo_core.prepared import PreparedRead
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.identity import App, Organization
from mosoo_core.tables.sessions import AgentSession

S = TypeVar("S", bound=sa.Select[Any])
_APPS: sa.Table = App.__table__  # type: ignore[attr-defined]
_ORGANIZATIONS: sa.Table = Organization.__table__  # type: ignore[attr-defined]
_THREADS: sa.Table = AgentSession.__table__  # type: ignore[attr-defined]


def organization_of(db: Session, account_id: str) -> Organization:
    organization = db.exec(
        select(Organization).where(Organization.owner_account_id == account_id)
    ).first()
    if organization is None:
        raise NotFound("Organization not found.")
    return organization


def _in_account(statement: S) -> S:
    """`statement` (which already has the `app` table) narrowed to the App of the account
    bound as `account_id`: the ownership check joins into the lookup, one query, not three."""
    return statement.join_from(
        _APPS, _ORGANIZATIONS, _ORGANIZATIONS.c.id == _APPS.c.organization_id
    ).where(_ORGANIZATIONS.c.owner_account_id == bindparam("account_id"))


# Built once: building a statement costs more than running it (the API reads these all the time).
_APP = _in_account(select(App).where(App.id == bindparam("app_id")))
_AGENT = _in_account(
    select(Agent)
    .join(_APPS, _APPS.c.id == Agent.app_id)
    .where(Agent.id == bindparam("agent_id"), Agent.app_id == bindparam("app_id"))
)


def thread_in_account(statement: S) -> S:
    """`statement`, which selects from `agent_session`, narrowed to the thread bound as
    `thread_id` if it is the account's (`account_id`): see `owned_thread_row`."""
    return _in_account(
        statement.join_from(_THREADS, _APPS, _APPS.c.id == _THREADS.c.app_id).where(
            _THREADS.c.id == bindparam("thread_id")
        )
    )


_THREAD = thread_in_account(select(AgentSession))


def owned_app(db: Session, account_id: str, app_id: str) -> App:
    params = {"account_id": account_id, "app_id": app_id}
    app = db.exec(_APP, params=params).first() if app_id else None
    if app is None:
        raise NotFound("App not found.")
    return app


def owned_agent(db: Session, account_id: str, app_id: str, agent_id: str) -> Agent:
    params = {"account_id": account_id, "app_id": app_id, "agent_id": agent_id}
    agent = db.exec(_AGENT, params=params).first() if app_id and agent_id else None
    if agent is None:
        owned_app(db, account_id, app_id)  # a foreign or unknown App still reads "App not found"
        raise NotFound("Agent not found.")
    return agent


def account_agent(db: Session, account_id: str, agent_id: str) -> Agent:
    """The account's Agent, by its id alone (the API's and the sandbox routes' lookups). An
    unknown id and another owner's Agent get the same NotFound: naming the other owner's App
    would tell a caller the id exists."""
    row = db.get(Agent, agent_id) if agent_id else None
    try:
        if row is None:
            raise NotFound("Agent not found.")
        return owned_agent(db, account_id, row.app_id, agent_id)
    except NotFound:
        raise NotFound("Agent not found.") from None


def owned_thread(db: Session, account_id: str, thread_id: str) -> AgentSession:
    """The thread if its App belongs to the account."""
    params = {"account_id": account_id, "thread_id": thread_id}
    row = db.exec(_THREAD, params=params).first() if thread_id else None
    if row is None:
        raise NotFound("Thread not found.")
    return row


def owned_thread_row(db: Connectable, account_id: str, thread_id: str, query: PreparedRead) -> Any:
    """`owned_thread`'s check, running `query` (made with `thread_in_account`, built once)
    for columns instead of loading the ORM row (half the CPU): for answers that only read."""
    params = {"account_id": account_id, "thread_id": thread_id}
    row = query.first(db, params) if thread_id else None
    if row is None:
        raise NotFound("Thread not found.")
    return row
