"""`/login`: email code (and Google when configured)."""

from __future__ import annotations

from urllib.parse import quote

import reflex as rx
from reflex.event import EventSpec

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, RateLimited
from mosoo_core.settings import get_settings
from mosoo_web.api.cookies import safe_next
from mosoo_web.api.google import google_sign_in_enabled
from mosoo_web.client_ip import tab_client_ip
from mosoo_web.components.forms import field_error
from mosoo_web.components.layout import brand
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, hard_navigate

QUERY_ERRORS = {
    "expired": "That sign-in link has expired. Sign in again.",
    "google_failed": "Google sign-in did not complete. Try again.",
    "google_unverified": "Your Google account's email is not verified, so it cannot sign in here.",
}


class LoginState(rx.State):
    step: rx.Field[str] = rx.field("email")
    email: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")
    notice: rx.Field[str] = rx.field("")
    busy: rx.Field[bool] = rx.field(False)
    google_enabled: rx.Field[bool] = rx.field(False)
    google_href: rx.Field[str] = rx.field("/api/auth/google/login")
    dev_mailbox: rx.Field[bool] = rx.field(False)

    def _next(self) -> str:
        return safe_next(self.router.url.query_parameters.get("next", "/"))

    @event
    async def on_load(self) -> EventSpec | None:
        session = await self.get_state(SessionState)
        if session._refresh():
            return rx.redirect(self._next(), replace=True)
        self.reset()  # type: ignore[no-untyped-call]  # Reflex leaves BaseState.reset unannotated
        self.google_enabled = google_sign_in_enabled()
        self.google_href = f"/api/auth/google/login?next={quote(self._next())}"
        self.dev_mailbox = get_settings().is_development and not get_settings().smtp_enabled
        self.error = QUERY_ERRORS.get(self.router.url.query_parameters.get("error", ""), "")
        return None

    @event
    def request_code(self, form: dict[str, str]) -> None:
        self.error = ""
        try:
            requested = identity.send_sign_in_code(
                email=form.get("email", ""), ip=tab_client_ip(self.router)
            )
        except (InvalidInput, RateLimited) as error:
            self.error = error.message
            return
        self.email = requested.email
        self.step = "code"
        self.notice = requested.notice

    @event
    def verify_code(self, form: dict[str, str]) -> EventSpec | None:
        self.error = ""
        try:
            with session_scope() as db:
                account = identity.verify_email_code(
                    db, email=self.email, code=form.get("code", ""), ip=tab_client_ip(self.router)
                )
                ticket = identity.issue_login_ticket(db, account.id)
        except (InvalidInput, RateLimited) as error:
            self.error = error.message
            return None
        # The ticket endpoint sets the HttpOnly cookie, which page code cannot do.
        return hard_navigate(f"/api/auth/finish?ticket={quote(ticket)}&next={quote(self._next())}")

    @event
    def use_another_address(self) -> None:
        self.step = "email"
        self.error = ""
        self.notice = ""


def _email_step() -> rx.Component:
    return rx.form(
        rx.vstack(
            rx.text("Email", size="2", weight="medium", as_="label"),
            rx.input(
                name="email",
                type="email",
                placeholder="you@company.com",
                default_value=LoginState.email,
                size="3",
                width="100%",
                auto_focus=True,
                data_testid="login-email",
            ),
            # Enabled once the page is connected: a click before that would go nowhere.
            rx.button(
                "Email me a code",
                type="submit",
                size="3",
                width="100%",
                disabled=~rx.State.is_hydrated,  # type: ignore[arg-type]  # Reflex types State.is_hydrated as a bool, on the class a Var
                data_testid="login-send-code",
            ),
            width="100%",
            spacing="3",
        ),
        on_submit=LoginState.request_code,
        reset_on_submit=False,
        width="100%",
    )


def _code_step() -> rx.Component:
    return rx.vstack(
        rx.callout(
            LoginState.notice, icon="mail", size="1", width="100%", data_testid="login-notice"
        ),
        rx.form(
            rx.vstack(
                rx.text("Sign-in code", size="2", weight="medium", as_="label"),
                rx.input(
                    name="code",
                    placeholder="123456",
                    input_mode="numeric",
                    auto_complete="one-time-code",
                    max_length=12,
                    size="3",
                    width="100%",
                    auto_focus=True,
                    data_testid="login-code",
                ),
                rx.button(
                    "Sign in",
                    type="submit",
                    size="3",
                    width="100%",
                    disabled=~rx.State.is_hydrated,  # type: ignore[arg-type]  # Reflex types State.is_hydrated as a bool, on the class a Var
                    data_testid="login-verify",
                ),
                width="100%",
                spacing="3",
            ),
            on_submit=LoginState.verify_code,
            reset_on_submit=True,
            width="100%",
        ),
        rx.button(
            "Use another address",
            variant="ghost",
            size="2",
            on_click=LoginState.use_another_address,
        ),
        width="100%",
        spacing="3",
    )


def login_page() -> rx.Component:
    return rx.center(
        rx.card(
            rx.vstack(
                brand(),
                rx.heading("Sign in", size="6", margin_top="8px"),
                rx.text("No password needed: we email you a code.", color_scheme="gray", size="2"),
                field_error(LoginState.error),
                rx.cond(LoginState.step == "email", _email_step(), _code_step()),
                rx.cond(
                    LoginState.google_enabled,
                    rx.vstack(
                        rx.hstack(
                            rx.divider(),
                            rx.text("or", size="1", color_scheme="gray"),
                            rx.divider(),
                            align="center",
                            width="100%",
                        ),
                        rx.link(
                            rx.button(
                                rx.icon("globe", size=16),
                                "Continue with Google",
                                variant="outline",
                                size="3",
                                width="100%",
                            ),
                            href=LoginState.google_href,
                            width="100%",
                            data_testid="login-google",
                        ),
                        width="100%",
                    ),
                    rx.fragment(),
                ),
                rx.cond(
                    LoginState.dev_mailbox,
                    rx.text(
                        "Development mode: codes appear in the log and in the ",
                        rx.link("dev mailbox", href="/dev/mailbox", data_testid="dev-mailbox-link"),
                        ".",
                        size="1",
                        color_scheme="gray",
                    ),
                    rx.fragment(),
                ),
                spacing="4",
                width="100%",
            ),
            size="4",
            width="100%",
            max_width="420px",
        ),
        min_height="100vh",
        padding="16px",
        background=rx.color("gray", 2),
    )
