"""`/apps/[app_id]`: the App's settings (name, id)."""

from __future__ import annotations

import reflex as rx

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.layout import (
    card_section,
    console_shell,
    missing_card,
    name_form,
    page_header,
)
from mosoo_web.state.session import SessionState, current_account_id


class AppSettingsState(rx.State):
    error: str = ""
    saving: bool = False

    @rx.event
    async def rename(self, form: dict[str, str]) -> rx.event.EventSpec | None:
        account_id = await current_account_id(self)
        self.error = ""
        session = await self.get_state(SessionState)
        try:
            with session_scope() as db:
                app = identity.rename_app(db, account_id, session.current_app_id, name=form.get("name", ""))
        except InvalidInput as error:
            self.error = error.message
            return None
        except NotFound:
            session.app_missing = True
            return None
        session.remember_app(app.id, app.name)
        return rx.toast.success("App renamed.")


def not_found_card() -> rx.Component:
    return missing_card("App not found", "Back to your Apps", "/apps", "app-not-found")


def _content() -> rx.Component:
    return rx.cond(
        SessionState.app_missing,
        not_found_card(),
        rx.vstack(
            page_header(SessionState.current_app_name, "App settings"),
            card_section(
                "Name",
                "Shown in the console and in the App switcher.",
                name_form(
                    field="name",
                    label="App name",
                    value=SessionState.current_app_name,
                    on_submit=AppSettingsState.rename,
                    error=AppSettingsState.error,
                    saving=AppSettingsState.saving,
                    test_id="app-name",
                ),
            ),
            card_section(
                "App ID",
                "Use it to address this App from the API and the CLI.",
                rx.code(SessionState.current_app_id, size="3", data_testid="app-id"),
            ),
            width="100%",
            spacing="4",
        ),
    )


def app_settings_page() -> rx.Component:
    return console_shell(_content)
