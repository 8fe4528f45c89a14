"""The console's per-action session check (`current_account_id`), on a real Reflex state
tree and database, without a browser: every call re-resolves the tab's cookie, and a
session that has ended raises `SignedOut`, which the app turns into the trip to /login."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from reflex.state import State
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_web.state.session import (
    OPEN_TABS,
    SessionState,
    SignedOut,
    current_account_id,
    current_app_ids,
    handle_backend_exception,
    hard_navigate,
)


def _tab(token: str | None, tab: str = "tab-1") -> SessionState:
    """A tab's state tree as Reflex builds it from the tab's connection."""
    root = State(_reflex_internal_init=True)
    cookie = f"mosoo_session={token}" if token else ""
    root.router_data = root._update_router_vars(
        {"headers": {"cookie": cookie}, "token": tab, "pathname": "/tokens", "asPath": "/tokens"},
        {},
    )
    session = root.get_substate(SessionState.get_full_name().split(".")[1:])
    assert isinstance(session, SessionState)
    return session


@pytest.fixture(autouse=True)
def no_open_tabs() -> Iterator[None]:
    for tab in OPEN_TABS.tabs():
        OPEN_TABS.drop(tab)
    yield
    for tab in OPEN_TABS.tabs():
        OPEN_TABS.drop(tab)


def _session(engine: Engine, email: str = "c@example.com", **start: object) -> identity.NewSession:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        new = identity.start_session(db, account.id, method="email", **start)  # type: ignore[arg-type]
        db.commit()
    return new


def _revoke(engine: Engine, token: str) -> None:
    with Session(engine) as db:
        assert identity.revoke_session(db, token)
        db.commit()


async def test_a_live_session_gives_its_account_and_binds_the_tab_to_it(engine: Engine) -> None:
    new = _session(engine)
    assert await current_account_id(_tab(new.token)) == new.account_id
    assert OPEN_TABS.take_session(new.session_id) == ["tab-1"]


async def test_every_call_checks_again_so_a_revoked_session_is_refused_at_once(
    engine: Engine,
) -> None:
    new = _session(engine)
    tab = _tab(new.token)
    tab._refresh()  # the page guard loaded the tab
    assert await current_account_id(tab) == new.account_id

    _revoke(engine, new.token)

    with pytest.raises(SignedOut):
        await current_account_id(tab)
    assert OPEN_TABS.session_ids() == set(), "a refused tab stays bound"


async def test_an_app_pages_ids_come_with_the_same_check(engine: Engine) -> None:
    new = _session(engine)
    tab = _tab(new.token)
    tab.current_app_id = "app-1"  # what the App guard resolved
    assert await current_app_ids(tab) == (new.account_id, "app-1")
    _revoke(engine, new.token)
    with pytest.raises(SignedOut):
        await current_app_ids(tab)


async def test_an_expired_missing_or_forged_session_is_refused(engine: Engine) -> None:
    expired = _session(engine, now=utcnow() - timedelta(days=31))
    for token in (expired.token, None, "forged"):
        with pytest.raises(SignedOut):
            await current_account_id(_tab(token))


async def test_a_cookie_of_another_account_than_the_tab_was_loaded_for_is_refused(
    engine: Engine,
) -> None:
    first = _session(engine, "first@example.com")
    other = _session(engine, "other@example.com")
    tab = _tab(other.token)
    tab._account_id = first.account_id  # loaded as `first`, reconnected with `other`'s cookie
    with pytest.raises(SignedOut):
        await current_account_id(tab)


def test_signed_out_becomes_the_trip_to_login_and_other_errors_stay_errors() -> None:
    leave = handle_backend_exception(SignedOut())
    assert leave.handler.fn is SessionState.leave_signed_out.fn
    toast = handle_backend_exception(ValueError("boom"))
    assert toast.handler.fn is not SessionState.leave_signed_out.fn


def test_leaving_forgets_the_account_and_loads_login_in_full(engine: Engine) -> None:
    new = _session(engine)
    tab = _tab(new.token)
    assert tab._refresh()
    assert OPEN_TABS.session_ids() == {new.session_id}

    spec = SessionState.leave_signed_out.fn(tab)

    assert (tab._account_id, tab.signed_in, tab.email, tab.apps) == ("", False, "", [])
    assert OPEN_TABS.session_ids() == set()
    # A full page load of /login, back to the page afterwards.
    assert str(spec.args) == str(hard_navigate("/login?next=%2Ftokens").args)


def test_the_tab_registry_holds_each_tab_once_and_empties_when_tabs_leave() -> None:
    OPEN_TABS.bind("tab-1", "session-a", "cookie-a")
    OPEN_TABS.bind("tab-2", "session-a", "cookie-a")
    assert OPEN_TABS.is_bound("tab-1", "cookie-a") and not OPEN_TABS.is_bound("tab-1", "cookie-b")

    # The tab's socket came back with another cookie: it now belongs to that session only.
    OPEN_TABS.bind("tab-1", "session-b", "cookie-b")
    assert OPEN_TABS.session_ids() == {"session-a", "session-b"} and len(OPEN_TABS) == 2

    assert OPEN_TABS.take_session("session-a") == ["tab-2"]
    OPEN_TABS.drop("tab-1")
    OPEN_TABS.drop("never-bound")
    assert (len(OPEN_TABS), OPEN_TABS.session_ids(), OPEN_TABS.take_session("session-b")) == (
        0,
        set(),
        [],
    )
