"""The signed-in account and the current App, resolved from the HttpOnly session cookie.

Every console action checks the sign-in session, not just page loads: a tab keeps its state
(and its websocket) for as long as it stays open, so an account id cached in it would let a
tab signed out elsewhere go on acting. `current_account_id` is the one place page states
get the account from; it re-resolves the cookie of the tab's connection against the
database on every call (no cache: one indexed query, and a cache would leave a window
for minting tokens or deleting things after sign-out). When the session is missing,
expired or revoked it raises `SignedOut` before the handler has touched anything, and
`handle_backend_exception` (the app's backend exception handler, also for background
events) turns that into `SessionState.leave_signed_out`: forget the tab's account and load
/login in full. Handlers therefore never catch `SignedOut` (nor a bare `Exception`).

Tabs are also closed without waiting for their next click: `OPEN_TABS` remembers which
session each tab of this process acts under, and `mosoo_web.state.signed_out_tabs` sends the
tabs of a session to /login when its revocation is announced on Redis or a sweep finds it
expired.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import quote

import reflex as rx
from reflex.app import default_backend_exception_handler
from reflex.event import EventSpec

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings
from mosoo_web.reflex_typing import event

log = get_logger(__name__)


class SignedOut(Exception):
    """The tab's sign-in session is missing, expired or revoked: the action must not run."""


def cookie_value(raw_cookie_header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw_cookie_header or "")
    except Exception:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel else None


def hard_navigate(path: str) -> EventSpec:
    """A full page load (needed to pick up a new or cleared cookie)."""
    return rx.call_script(f"window.location.assign({json.dumps(path)})")


def _cookie_key(token: str | None) -> str:
    # Only tells whether a tab's cookie changed since it was bound; never stored in the DB.
    return hashlib.sha256((token or "").encode()).hexdigest()


@dataclass(frozen=True)
class _Binding:
    session_id: str
    cookie_key: str


class OpenTabs:
    """The console tabs this web process serves and the sign-in session each acts under
    (client token -> session id). Process-local on purpose: a tab's websocket, and so its
    events, live in one process, and that process is the one to push it to /login. A tab is
    bound whenever it passes a session check and dropped when it signs out, is sent to
    /login, or its socket is gone (the sweep in `signed_out_tabs`), so the map never holds
    more than the connected tabs."""

    def __init__(self) -> None:
        self._tabs: dict[str, _Binding] = {}
        self._by_session: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._tabs)

    def is_bound(self, tab: str, token: str | None) -> bool:
        binding = self._tabs.get(tab)
        return binding is not None and binding.cookie_key == _cookie_key(token)

    def bind(self, tab: str, session_id: str, token: str | None) -> None:
        if not tab:
            return
        self.drop(tab)
        self._tabs[tab] = _Binding(session_id, _cookie_key(token))
        self._by_session.setdefault(session_id, set()).add(tab)

    def drop(self, tab: str) -> None:
        binding = self._tabs.pop(tab, None)
        if binding is None:
            return
        tabs = self._by_session.get(binding.session_id)
        if tabs is not None:
            tabs.discard(tab)
            if not tabs:
                del self._by_session[binding.session_id]

    def take_session(self, session_id: str) -> list[str]:
        """Unbind and return the tabs of a session that has ended."""
        tabs = sorted(self._by_session.pop(session_id, set()))
        for tab in tabs:
            self._tabs.pop(tab, None)
        return tabs

    def tabs(self) -> list[str]:
        return list(self._tabs)

    def session_ids(self) -> set[str]:
        return set(self._by_session)


OPEN_TABS = OpenTabs()


@dataclass(frozen=True)
class _Resolved:
    account_id: str | None
    session_id: str | None  # looked up only for a tab not bound yet


def _resolve(token: str | None, with_session_id: bool) -> _Resolved:
    with session_scope() as db:
        account_id = identity.resolve_session(db, token)
        session_id = (
            identity.session_id_for_token(db, token) if account_id and with_session_id else None
        )
    return _Resolved(account_id, session_id)


class SessionState(rx.State):
    """Who is signed in. The account id stays on the server (a backend var)."""

    _account_id: str = ""
    signed_in: rx.Field[bool] = rx.field(False)
    email: rx.Field[str] = rx.field("")
    name: rx.Field[str] = rx.field("")
    organization_name: rx.Field[str] = rx.field("")
    apps: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    current_app_id: rx.Field[str] = rx.field("")
    current_app_name: rx.Field[str] = rx.field("")
    app_missing: rx.Field[bool] = rx.field(False)

    def _token(self) -> str | None:
        return cookie_value(self.router.headers.cookie, get_settings().session_cookie)

    def _tab(self) -> str:
        return self.router.session.client_token

    def _refresh(self) -> bool:
        token = self._token()
        with session_scope() as db:
            account_id = identity.resolve_session(db, token)
            if account_id is None:
                OPEN_TABS.drop(self._tab())
                return False
            account = identity.get_account(db, account_id)
            apps = identity.list_apps(db, account_id)
            session_id = (
                None
                if OPEN_TABS.is_bound(self._tab(), token)
                else identity.session_id_for_token(db, token)
            )
        if session_id:
            OPEN_TABS.bind(self._tab(), session_id, token)
        self._account_id = account.id
        self.signed_in = True
        self.email = account.email
        self.name = account.name
        self.organization_name = account.organization_name
        self.apps = [{"id": app.id, "name": app.name} for app in apps]
        return True

    def _forget(self) -> None:
        # Reflex keeps a tab's state across reloads: leave nothing of the account behind.
        OPEN_TABS.drop(self._tab())
        self.reset()  # type: ignore[no-untyped-call]  # Reflex leaves BaseState.reset unannotated
        self._account_id = ""

    def _return_path(self) -> str:
        url = self.router.url
        return (url.path or "/") + (f"?{url.query}" if url.query else "")

    def _sign_in_redirect(self) -> EventSpec:
        """To /login, coming back to this very page afterwards (query string included, so a
        link such as `/cli-auth?code=…` still works after signing in)."""
        self._forget()
        return rx.redirect(f"/login?next={quote(self._return_path(), safe='')}", replace=True)

    def guard(self) -> EventSpec | None:
        """None when someone is signed in (and loaded), else the redirect to /login. For page
        states whose own `on_load` must run the guard first."""
        return None if self._refresh() else self._sign_in_redirect()

    @event
    def require_account(self) -> EventSpec | None:
        """The one guard of console pages: no valid session, go to /login."""
        return self.guard()

    @event
    def require_app(self) -> EventSpec | None:
        """Guard for `/apps/[app_id]/...`: the App must be the account's own."""
        if not self._refresh():
            return self._sign_in_redirect()
        app_id = str(self.router.page.params.get("app_id", ""))
        try:
            with session_scope() as db:
                app = identity.get_app(db, self._account_id, app_id)
        except NotFound:
            self.app_missing = True
            self.current_app_id = ""
            self.current_app_name = ""
            return None
        self.app_missing = False
        self.current_app_id = app.id
        self.current_app_name = app.name
        return None

    @event
    def enter_console(self) -> EventSpec:
        """`/`: straight into the only App, or the picker when there are several."""
        if not self._refresh():
            return self._sign_in_redirect()
        if len(self.apps) == 1:
            return rx.redirect(f"/apps/{self.apps[0]['id']}", replace=True)
        return rx.redirect("/apps", replace=True)

    @event
    def switch_app(self, app_id: str) -> EventSpec:
        return rx.redirect(f"/apps/{app_id}")

    @event
    async def sign_out(self) -> EventSpec:
        """Revoke the session on the server (which announces it, so the other open tabs of
        this browser leave too), then clear the cookie and leave."""
        token = self._token()
        # Unbound first: the announcement of this very sign-out need not come back here.
        OPEN_TABS.drop(self._tab())
        await asyncio.to_thread(identity.sign_out, token)
        self._forget()
        return rx.call_script(
            "fetch('/api/auth/logout', {method: 'POST', credentials: 'same-origin'})"
            ".finally(() => window.location.assign('/login'))"
        )

    @event
    def leave_signed_out(self) -> EventSpec:
        """Where a tab whose session has ended goes: its account forgotten, /login loaded in
        full (which also closes this websocket), coming back to this page after signing in.
        Sent by `handle_backend_exception` and by the push in `signed_out_tabs`."""
        target = self._return_path()
        self._forget()
        return hard_navigate(f"/login?next={quote(target, safe='')}")

    def remember_app(self, app_id: str, name: str) -> None:
        """Keep the navigation in step after a page renames or creates an App."""
        known = [a for a in self.apps if a["id"] != app_id]
        self.apps = sorted([*known, {"id": app_id, "name": name}], key=lambda a: a["id"])
        if self.current_app_id == app_id:
            self.current_app_name = name


async def check_tab_session(session: SessionState) -> str:
    """The account the tab's session cookie belongs to, checked against the database now;
    raises `SignedOut` when the session is missing, expired or revoked, or belongs to
    another account than the one the tab was loaded for (the socket reconnected with a
    cookie set by a sign-in elsewhere: reload rather than mix two accounts' state)."""
    token, tab = session._token(), session._tab()
    resolved = await asyncio.to_thread(_resolve, token, not OPEN_TABS.is_bound(tab, token))
    if resolved.account_id is None or (
        session._account_id and resolved.account_id != session._account_id
    ):
        OPEN_TABS.drop(tab)
        raise SignedOut
    if resolved.session_id:
        OPEN_TABS.bind(tab, resolved.session_id, token)
    return resolved.account_id


async def current_account_id(state: rx.State) -> str:
    """The signed-in account for any page state, re-checked on every call (see the module
    docstring). Call it before changing anything: it raises `SignedOut`, which the app
    turns into the trip to /login. In a background event, call it inside `async with self`."""
    return await check_tab_session(await state.get_state(SessionState))


async def current_app_ids(state: rx.State) -> tuple[str, str]:
    """(account id, current App id) for an App page's state: the account re-checked as
    `current_account_id` does (it raises `SignedOut`), the App the page guard resolved."""
    account_id = await current_account_id(state)
    return account_id, (await state.get_state(SessionState)).current_app_id


async def tab_signed_out(state: rx.State) -> bool:
    """For background followers, on each turn: True when the tab has already been signed
    out and sent to /login (stop quietly); raises `SignedOut` when its session has ended
    unnoticed (the exception takes the tab to /login). Call inside `async with self`."""
    session = await state.get_state(SessionState)
    if not session.signed_in:
        return True
    await check_tab_session(session)
    return False


def handle_backend_exception(exception: Exception) -> EventSpec:
    """The app's backend exception handler: `SignedOut` sends the tab to /login; anything
    else goes to Reflex's default handler (logged, and a toast)."""
    if isinstance(exception, SignedOut):
        log.info("console.signed_out_tab_refused")
        # Reflex types a handler called on its class as an EventCallback; it is an EventSpec.
        return SessionState.leave_signed_out()  # type: ignore[return-value]
    return default_backend_exception_handler(exception)
