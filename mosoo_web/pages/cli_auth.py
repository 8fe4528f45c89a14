"""`/cli-auth`: confirm (or refuse) a `mosoo login` device code.

The person checks that the code here is the one in their terminal before approving: that
check is what stops someone from phishing an approval for their own CLI.
"""

from __future__ import annotations

import reflex as rx
from reflex.event import EventSpec

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, NotFound
from mosoo_web.components.forms import inline_form
from mosoo_web.components.layout import card_section, console_shell, page_column, page_header
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_account_id

STATUS_MESSAGES = {
    "authorized": "This code has already been approved.",
    "consumed": "This code has already been used. Run mosoo login again to sign in another CLI.",
    "denied": "This code was denied. Run mosoo login again if that was a mistake.",
    "expired": "This code has expired. Run mosoo login again for a new one.",
}


class CliAuthState(rx.State):
    # The code field's value (controlled: the page's load sets it from ?code= or clears it,
    # in order with what is typed, so typing before the load finished is kept).
    code: rx.Field[str] = rx.field("")
    user_code: rx.Field[str] = rx.field("")  # the request on screen, formatted XXXX-XXXX
    client_name: rx.Field[str] = rx.field("")
    # "" (nothing looked up), pending, authorized, denied, expired, consumed
    status: rx.Field[str] = rx.field("")
    outcome: rx.Field[str] = rx.field("")  # "approved" | "denied" after this page decided
    error: rx.Field[str] = rx.field("")

    def _clear(self) -> None:
        self.user_code = self.client_name = self.status = self.outcome = self.error = ""

    def _show(self, raw_code: str) -> None:
        self._clear()
        self.code = raw_code
        if not raw_code.strip():
            self.error = "Enter the code shown in your terminal."
            return
        try:
            with session_scope() as db:
                view = identity.describe_device_authorization(db, raw_code)
        except NotFound as error:
            self.error = error.message
            return
        self.user_code, self.client_name, self.status = (
            view.user_code,
            view.client_name,
            view.status,
        )

    @event
    async def load(self) -> EventSpec | None:
        """The console guard (which keeps `?code=` through sign-in), then the code's request."""
        code = self.router.url.query_parameters.get("code", "")
        session = await self.get_state(SessionState)
        redirect = session.guard()
        if redirect is not None:
            return redirect
        if code:
            self._show(code)
        else:
            self._clear()
            self.code = ""
        return None

    @event
    def set_code(self, value: str) -> None:
        self.code = value[:20]

    @event
    async def look_up(self, form: dict[str, str]) -> None:
        await current_account_id(self)  # only a signed-in tab may look requests up
        self._show(form.get("code", ""))

    async def _decide(self, approve: bool) -> None:
        account_id = await current_account_id(self)
        try:
            with session_scope() as db:
                decide = (
                    identity.approve_device_authorization
                    if approve
                    else identity.deny_device_authorization
                )
                view = decide(db, account_id, self.user_code)
        except NotFound as error:
            self._clear()
            self.error = error.message
            return
        except Conflict:
            self._show(self.user_code)
            return
        self.status = view.status
        self.outcome = "approved" if approve else "denied"

    @event
    async def approve(self) -> None:
        await self._decide(approve=True)

    @event
    async def deny(self) -> None:
        await self._decide(approve=False)

    @rx.var
    def status_message(self) -> str:
        return "" if self.outcome else STATUS_MESSAGES.get(self.status, "")


def _code_form() -> rx.Component:
    return inline_form(
        "Code",
        rx.input(
            name="code",
            value=CliAuthState.code,
            on_change=CliAuthState.set_code,
            placeholder="XXXX-XXXX",
            max_length=20,
            width="100%",
            size="3",
            auto_complete="off",
            data_testid="cli-code-input",
        ),
        rx.button("Continue", type="submit", size="3", data_testid="cli-code-submit"),
        CliAuthState.error,
        on_submit=CliAuthState.look_up,
    )


def _confirmation() -> rx.Component:
    return rx.vstack(
        rx.text(
            rx.text.strong(CliAuthState.client_name, data_testid="cli-client-name"),
            " wants to sign in as ",
            rx.text.strong(SessionState.email),
            ".",
            size="3",
        ),
        rx.text("Check that your terminal shows exactly this code:", size="2", color_scheme="gray"),
        rx.code(CliAuthState.user_code, size="6", weight="bold", data_testid="cli-user-code"),
        rx.text(
            "Approve only if you just ran mosoo login yourself. The CLI gets an access token that acts as you.",
            size="2",
            color_scheme="gray",
        ),
        rx.hstack(
            rx.button(
                rx.icon("check", size=16),
                "Approve",
                size="3",
                on_click=CliAuthState.approve,
                data_testid="cli-approve",
            ),
            rx.button(
                rx.icon("x", size=16),
                "Deny",
                size="3",
                variant="soft",
                color_scheme="red",
                on_click=CliAuthState.deny,
                data_testid="cli-deny",
            ),
            spacing="3",
        ),
        spacing="3",
        width="100%",
    )


def _outcome() -> rx.Component:
    return rx.cond(
        CliAuthState.outcome == "approved",
        rx.callout(
            "Approved. Go back to your terminal: the CLI is signed in within a few seconds.",
            icon="circle-check",
            color_scheme="green",
            width="100%",
            data_testid="cli-approved",
        ),
        rx.callout(
            "Denied. The CLI was not signed in.",
            icon="ban",
            color_scheme="gray",
            width="100%",
            data_testid="cli-denied",
        ),
    )


def _request() -> rx.Component:
    return rx.cond(
        CliAuthState.outcome != "",
        _outcome(),
        rx.cond(
            CliAuthState.status == "pending",
            _confirmation(),
            rx.vstack(
                rx.callout(
                    CliAuthState.status_message,
                    icon="triangle-alert",
                    color_scheme="amber",
                    width="100%",
                    data_testid="cli-status",
                ),
                _code_form(),
                width="100%",
                spacing="3",
            ),
        ),
    )


def _content() -> rx.Component:
    return page_column(
        page_header(
            "Sign in the CLI", "Confirm the code that mosoo login printed in your terminal."
        ),
        card_section(
            "Device sign-in",
            "Codes are valid for 10 minutes and work once.",
            rx.cond(CliAuthState.status == "", _code_form(), _request()),
        ),
    )


def cli_auth_page() -> rx.Component:
    return console_shell(_content)
