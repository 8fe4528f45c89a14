"""`/apps/[app_id]/settings`: the App's settings (name, id). The App home is `/apps/[app_id]`
(pages/app_home.py)."""

from __future__ import annotations

import reflex as rx
from reflex.event import EventSpec

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.forms import name_form
from mosoo_web.components.layout import app_page, card_section, console_shell, page_header
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_account_id


class AppSettingsState(rx.State):
    error: rx.Field[str] = rx.field("")
    saving: rx.Field[bool] = rx.field(False)

    @event
    async def rename(self, form: dict[str, str]) -> EventSpec | None:
        account_id = await current_account_id(self)
        self.error = ""
        session = await self.get_state(SessionState)
        try:
            with session_scope() as db:
                app = identity.rename_app(
                    db, account_id, session.current_app_id, name=form.get("name", "")
                )
        except InvalidInput as error:
            self.error = error.message
            return None
        except NotFound:
            session.app_missing = True
            return None
        session.remember_app(app.id, app.name)
        return rx.toast.success("App renamed.")


def _content() -> rx.Component:
    return app_page(
        page_header(SessionState.current_app_name, "App settings"),
        card_section(
            "Name",
            "Shown in the console and in the App switcher.",
            name_form("App name", SessionState.current_app_name, AppSettingsState, "app-name"),
        ),
        card_section(
            "App ID",
            "Use it to address this App from the API and the CLI.",
            rx.code(SessionState.current_app_id, size="3", data_testid="app-id"),
        ),
    )


def app_settings_page() -> rx.Component:
    return console_shell(_content)
