"""The signed-in account and the current App, resolved from the HttpOnly session cookie."""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from urllib.parse import quote

import reflex as rx

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound
from mosoo_core.settings import get_settings


def cookie_value(raw_cookie_header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw_cookie_header or "")
    except Exception:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel else None


def hard_navigate(path: str) -> rx.event.EventSpec:
    """A full page load (needed to pick up a new or cleared cookie)."""
    return rx.call_script(f"window.location.assign({json.dumps(path)})")


class SessionState(rx.State):
    """Who is signed in. The account id stays on the server (a backend var)."""

    _account_id: str = ""
    signed_in: bool = False
    email: str = ""
    name: str = ""
    organization_name: str = ""
    apps: list[dict[str, str]] = []
    current_app_id: str = ""
    current_app_name: str = ""
    app_missing: bool = False

    def _token(self) -> str | None:
        return cookie_value(self.router.headers.cookie, get_settings().session_cookie)

    def _refresh(self) -> bool:
        with session_scope() as db:
            account_id = identity.resolve_session(db, self._token())
            if account_id is None:
                return False
            account = identity.get_account(db, account_id)
            apps = identity.list_apps(db, account_id)
        self._account_id = account.id
        self.signed_in = True
        self.email = account.email
        self.name = account.name
        self.organization_name = account.organization_name
        self.apps = [{"id": app.id, "name": app.name} for app in apps]
        return True

    def _forget(self) -> None:
        # Reflex keeps a tab's state across reloads: leave nothing of the account behind.
        self.reset()
        self._account_id = ""

    def _sign_in_redirect(self) -> rx.event.EventSpec:
        """To /login, coming back to this very page afterwards (query string included, so a
        link such as `/cli-auth?code=…` still works after signing in)."""
        self._forget()
        url = self.router.url
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        return rx.redirect(f"/login?next={quote(target, safe='')}", replace=True)

    def guard(self) -> rx.event.EventSpec | None:
        """None when someone is signed in (and loaded), else the redirect to /login. For page
        states whose own `on_load` must run the guard first."""
        return None if self._refresh() else self._sign_in_redirect()

    @rx.event
    def require_account(self) -> rx.event.EventSpec | None:
        """The one guard of console pages: no valid session, go to /login."""
        return self.guard()

    @rx.event
    def require_app(self) -> rx.event.EventSpec | None:
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

    @rx.event
    def enter_console(self) -> rx.event.EventSpec:
        """`/`: straight into the only App, or the picker when there are several."""
        if not self._refresh():
            return self._sign_in_redirect()
        if len(self.apps) == 1:
            return rx.redirect(f"/apps/{self.apps[0]['id']}", replace=True)
        return rx.redirect("/apps", replace=True)

    @rx.event
    def switch_app(self, app_id: str) -> rx.event.EventSpec:
        return rx.redirect(f"/apps/{app_id}")

    @rx.event
    def sign_out(self) -> rx.event.EventSpec:
        """Revoke the session on the server, then clear the cookie and leave."""
        with session_scope() as db:
            identity.revoke_session(db, self._token())
        self._forget()
        return rx.call_script(
            "fetch('/api/auth/logout', {method: 'POST', credentials: 'same-origin'})"
            ".finally(() => window.location.assign('/login'))"
        )

    def remember_app(self, app_id: str, name: str) -> None:
        """Keep the navigation in step after a page renames or creates an App."""
        known = [a for a in self.apps if a["id"] != app_id]
        self.apps = sorted([*known, {"id": app_id, "name": name}], key=lambda a: a["id"])
        if self.current_app_id == app_id:
            self.current_app_name = name


async def current_account_id(state: rx.State) -> str:
    """The signed-in account for any page state; empty when nobody is signed in."""
    session = await state.get_state(SessionState)
    return session._account_id
