"""`/org`: the Organization's settings."""

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


class OrganizationState(rx.State):
    error: rx.Field[str] = rx.field("")
    saving: rx.Field[bool] = rx.field(False)

    @event
    async def rename(self, form: dict[str, str]) -> EventSpec | None:
        account_id = await current_account_id(self)
        self.error = ""
        try:
            with session_scope() as db:
                organization = identity.rename_organization(
                    db, account_id, name=form.get("name", "")
                )
        except InvalidInput as error:
            self.error = error.message
            return None
        session = await self.get_state(SessionState)
        session.organization_name = organization.name
        return rx.toast.success("Organization renamed.")


def _content() -> rx.Component:
    return page_column(
        page_header("Organization", "Your account, billing and tenant shell. Apps live inside it."),
        card_section(
            "Name",
            "One owner per Organization in this version.",
            name_form(
                "Organization name", SessionState.organization_name, OrganizationState, "org-name"
            ),
        ),
    )


def organization_page() -> rx.Component:
    return console_shell(_content)
