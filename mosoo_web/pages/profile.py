"""`/profile`: the signed-in person."""

from __future__ import annotations

import reflex as rx
from reflex.event import EventSpec

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput
from mosoo_web.components.forms import name_form
from mosoo_web.components.layout import card_section, console_shell, page_column, page_header
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_account_id


class ProfileState(rx.State):
    error: rx.Field[str] = rx.field("")
    saving: rx.Field[bool] = rx.field(False)

    @event
    async def rename(self, form: dict[str, str]) -> EventSpec | None:
        account_id = await current_account_id(self)
        self.error = ""
        try:
            with session_scope() as db:
                account = identity.update_profile(db, account_id, name=form.get("name", ""))
        except InvalidInput as error:
            self.error = error.message
            return None
        session = await self.get_state(SessionState)
        session.name = account.name
        return rx.toast.success("Profile saved.")


def _content() -> rx.Component:
    return page_column(
        page_header("Profile", SessionState.email),
        card_section(
            "Your name",
            "How Mosoo greets you.",
            name_form("Name", SessionState.name, ProfileState, "profile-name"),
        ),
        card_section(
            "Email",
            "Sign in with a code sent here, or with Google using the same address.",
            rx.text(SessionState.email, weight="medium"),
        ),
    )


def profile_page() -> rx.Component:
    return console_shell(_content)
