"""Closing the open tabs of a session that has ended, without waiting for their next click.

A lifespan task of each web process (`close_signed_out_tabs`). It listens for revoked
session ids on Redis (`identity.revoked_sessions`, published by `identity.sign_out` after
its commit) and, every `MOSOO_TAB_SWEEP_SECONDS` (30), checks the sessions of its tabs
against the database. For each tab of an ended session that this process serves (`OPEN_TABS`), it
queues `SessionState.leave_signed_out` as an event of that tab: Reflex runs it under the
tab's state lock like any other event, so the tab's state is forgotten and the full load of
/login is pushed down the tab's own websocket. Each process handles the tabs whose sockets
it holds, which is what makes this work with several web processes: everyone hears the
announcement, the one serving the tab acts.

What the sweep catches: expired sessions (nothing announces those), deleted ones, and
revocations the announcement missed — Redis down at sign-out, or a revocation that does
not announce (a sign-in replacing the browser's previous session). A revocation younger
than one sweep period is left to its announcement, so a missed one closes its tabs within
two periods. When the subscription itself comes back after a Redis outage, every tab is
re-checked at once, fresh revocations included. Meanwhile, and always, the per-action
check in `current_account_id` refuses whatever a signed-out tab submits.

The sweep also unbinds tabs whose socket is no longer in this process, which keeps
`OPEN_TABS` as small as the set of connected tabs.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import reflex as rx
from reflex.event import Event

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings
from mosoo_web.state.session import OPEN_TABS, SessionState

log = get_logger(__name__)


def sweep_seconds() -> float:
    return get_settings().tab_sweep_seconds


def _connected_here(app: rx.App, tab: str) -> bool:
    namespace = app.event_namespace
    if namespace is None:
        return False
    # Reflex keeps no public "is this socket mine" yet; the token manager knows.
    manager = namespace._token_manager
    record = manager.token_to_socket.get(tab)
    return record is not None and record.instance_id == manager.instance_id


async def _send_to_login(app: rx.App, session_id: str, reason: str) -> None:
    for tab in OPEN_TABS.take_session(session_id):
        if not _connected_here(app, tab):
            continue  # gone meanwhile: its next page load runs the guard anyway
        for event in Event.from_event_type(SessionState.leave_signed_out):
            await app.event_processor.enqueue(tab, event)
        log.info("console.tab_signed_out", session_id=session_id, reason=reason)


def _ended(session_ids: set[str], fresh_revocations: bool) -> set[str]:
    now = utcnow()
    revoked_before = None if fresh_revocations else now - timedelta(seconds=sweep_seconds())
    with session_scope() as db:
        return identity.ended_sessions(db, session_ids, now=now, revoked_before=revoked_before)


async def sweep(app: rx.App, *, fresh_revocations: bool = False) -> None:
    """Unbind the tabs that left this process, then close those of ended sessions."""
    for tab in OPEN_TABS.tabs():
        if not _connected_here(app, tab):
            OPEN_TABS.drop(tab)
    session_ids = OPEN_TABS.session_ids()
    if not session_ids:
        return
    ended = await asyncio.to_thread(_ended, session_ids, fresh_revocations)
    for session_id in ended:
        await _send_to_login(app, session_id, "session_ended")


async def _sweep_forever(app: rx.App) -> None:
    while True:
        await asyncio.sleep(sweep_seconds())
        try:
            await sweep(app)
        except Exception as error:  # the database away for a moment: try again next period
            log.warning("console.tab_sweep_failed", error=type(error).__name__)


async def close_signed_out_tabs(app: rx.App) -> None:
    """The lifespan task (see the module docstring)."""

    async def resubscribed() -> None:
        # Announcements made while there was no subscription are lost: re-check everything.
        try:
            await sweep(app, fresh_revocations=True)
        except Exception as error:
            log.warning("console.tab_sweep_failed", error=type(error).__name__)

    sweeper = asyncio.create_task(_sweep_forever(app), name="mosoo_tab_sweep")
    try:
        async for session_id in identity.revoked_sessions(on_subscribed=resubscribed):
            try:
                await _send_to_login(app, session_id, "signed_out")
            except Exception as error:  # one tab's push failing must not end the listener
                log.warning("console.tab_push_failed", error=type(error).__name__)
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
