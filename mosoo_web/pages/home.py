"""`/` and `/apps`: go straight into the only App, or pick one (and create more)."""

from __future__ import annotations

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput
from mosoo_web.components.forms import inline_form
from mosoo_web.components.layout import console_shell, page_column, page_header
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_account_id


class AppsState(rx.State):
    create_error: rx.Field[str] = rx.field("")
    creating: rx.Field[bool] = rx.field(False)

    @event
    async def create_app(self, form: dict[str, str]) -> EventSpec | None:
        account_id = await current_account_id(self)
        self.create_error = ""
        try:
            with session_scope() as db:
                app = identity.create_app(db, account_id, name=form.get("name", ""))
        except InvalidInput as error:
            self.create_error = error.message
            return None
        session = await self.get_state(SessionState)
        session.remember_app(app.id, app.name)
        return rx.redirect(f"/apps/{app.id}")


def _app_card(app: ObjectVar[dict[str, str]]) -> rx.Component:
    return rx.link(
        rx.card(
            rx.hstack(
                rx.box(rx.icon("app-window", size=20), color=rx.color("accent", 11)),
                rx.text(app["name"], size="3", weight="medium"),
                rx.spacer(),
                rx.icon("chevron-right", size=16, color=rx.color("gray", 9)),
                align="center",
                width="100%",
            ),
            width="100%",
            _hover={"background": rx.color("gray", 3)},
        ),
        href="/apps/" + app["id"].to(str),
        underline="none",
        width="100%",
        data_testid="app-card",
    )


def _apps_content() -> rx.Component:
    return page_column(
        page_header("Your Apps", SessionState.organization_name),
        rx.vstack(rx.foreach(SessionState.apps, _app_card), width="100%", spacing="2"),
        rx.card(
            inline_form(
                "New App",
                rx.input(
                    name="name",
                    placeholder="App name",
                    size="3",
                    width="100%",
                    max_length=200,
                    data_testid="new-app-name",
                ),
                rx.button("Create App", type="submit", size="3", data_testid="new-app-submit"),
                AppsState.create_error,
                on_submit=AppsState.create_app,
                spacing="3",
                reset_on_submit=True,
            ),
            width="100%",
            margin_top="16px",
        ),
        spacing="3",
    )


def index_page() -> rx.Component:
    return rx.center(rx.spinner(size="3"), height="100vh")


def apps_page() -> rx.Component:
    return console_shell(_apps_content)
