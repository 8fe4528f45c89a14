"""`/tokens`: personal access tokens for the public API and the CLI.

A new token's secret is shown once, right after it is created: it lives in this tab's state
only until the person dismisses it or the page loads again, and the server keeps a digest.
"""

from __future__ import annotations

from dataclasses import dataclass

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.dialogs import confirm_dialog, trash_button
from mosoo_web.components.forms import inline_form
from mosoo_web.components.layout import card_section, console_shell, page_column, page_header
from mosoo_web.formatting import relative_time
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_account_id

SOURCE_LABELS = {"console": "Console", "cli": "CLI sign-in"}


@dataclass
class TokenRow:
    id: str = ""
    label: str = ""
    suffix: str = ""
    source: str = ""
    created: str = ""
    last_used: str = ""


def _rows(views: list[identity.AccessTokenView]) -> list[TokenRow]:
    now = utcnow()
    return [
        TokenRow(
            id=view.id,
            label=view.label,
            suffix="…" + view.display_suffix,
            source=SOURCE_LABELS.get(view.source, view.source),
            created=relative_time(view.created_at, now),
            last_used=relative_time(view.last_used_at, now) if view.last_used_at else "never",
        )
        for view in views
    ]


class TokensState(rx.State):
    tokens: rx.Field[list[TokenRow]] = rx.field(default_factory=list)
    label_error: rx.Field[str] = rx.field("")
    # The secret of the token just created; cleared on dismiss and on every page load.
    new_secret: rx.Field[str] = rx.field("")
    new_label: rx.Field[str] = rx.field("")
    form_version: rx.Field[int] = rx.field(0)

    def _list(self, account_id: str) -> None:
        with session_scope() as db:
            self.tokens = _rows(identity.list_access_tokens(db, account_id))

    @event
    async def load(self) -> None:
        self.new_secret = self.new_label = self.label_error = ""
        if not (await self.get_state(SessionState)).signed_in:
            self.tokens = []  # the page guard has just sent the tab to /login
            return
        self._list(await current_account_id(self))

    @event
    async def create(self, form: dict[str, str]) -> EventSpec | None:
        account_id = await current_account_id(self)
        self.label_error = ""
        try:
            with session_scope() as db:
                created = identity.create_access_token(db, account_id, form.get("label", ""))
        except (InvalidInput, NotFound) as error:
            self.label_error = error.message
            return None
        self.new_secret = created.secret
        self.new_label = created.token.label
        self.form_version += 1
        self._list(account_id)
        return None

    @event
    def dismiss_secret(self) -> None:
        self.new_secret = self.new_label = ""

    @event
    def copy_secret(self) -> list[EventSpec]:
        return [rx.set_clipboard(self.new_secret), rx.toast.success("Token copied.")]

    @event
    async def revoke(self, token_id: str) -> EventSpec:
        account_id = await current_account_id(self)
        try:
            with session_scope() as db:
                identity.revoke_access_token(db, account_id, token_id)
        except NotFound:
            self._list(account_id)
            return rx.toast.error("That token no longer exists.")
        self._list(account_id)
        return rx.toast.success("Token revoked. Anything using it is signed out.")


def _new_secret_callout() -> rx.Component:
    return rx.cond(
        TokensState.new_secret != "",
        rx.callout.root(
            rx.vstack(
                rx.text(
                    "Copy the token for “",
                    TokensState.new_label,
                    "” now: it is shown only this once and cannot be recovered.",
                    weight="medium",
                    size="2",
                ),
                rx.hstack(
                    rx.code(
                        TokensState.new_secret,
                        size="2",
                        data_testid="token-secret",
                        word_break="break-all",
                    ),
                    rx.button(
                        rx.icon("copy", size=14),
                        "Copy",
                        size="1",
                        variant="soft",
                        on_click=TokensState.copy_secret,
                        data_testid="token-copy",
                    ),
                    align="center",
                    spacing="2",
                    wrap="wrap",
                ),
                rx.text(
                    "Send it as ",
                    rx.code("Authorization: Bearer <token>", size="1"),
                    " to the API, or let mosoo login create one for the CLI.",
                    size="1",
                    color_scheme="gray",
                ),
                rx.button(
                    "Done",
                    size="1",
                    variant="outline",
                    on_click=TokensState.dismiss_secret,
                    data_testid="token-secret-done",
                ),
                spacing="2",
                width="100%",
            ),
            color_scheme="amber",
            width="100%",
            data_testid="token-created",
        ),
        rx.fragment(),
    )


def _create_form() -> rx.Component:
    return inline_form(
        "Label",
        rx.input(
            name="label",
            placeholder="e.g. Support backend",
            max_length=80,
            width="100%",
            size="3",
            data_testid="token-label-input",
        ),
        rx.button("Create token", type="submit", size="3", data_testid="token-create"),
        TokensState.label_error,
        on_submit=TokensState.create,
        key=TokensState.form_version,
    )


def _revoke_button(row: ObjectVar[TokenRow]) -> rx.Component:
    return confirm_dialog(
        "Revoke “" + row.label.to(str) + "”?",
        "It stops working at once. Scripts and CLIs using it will have to sign in again.",
        confirm="Revoke",
        on_confirm=TokensState.revoke(row.id),
        confirm_test_id="token-revoke-confirm",
        trigger=trash_button("Revoke", "token-revoke"),
    )


def _token_row(row: ObjectVar[TokenRow]) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.text(row.label, weight="medium", data_testid="token-label")),
        rx.table.cell(rx.code(row.suffix, size="1", data_testid="token-suffix")),
        rx.table.cell(rx.badge(row.source, variant="soft", color_scheme="gray")),
        rx.table.cell(rx.text(row.created, size="2")),
        rx.table.cell(rx.text(row.last_used, size="2", data_testid="token-last-used")),
        rx.table.cell(_revoke_button(row)),
        align="center",
        data_testid="token-row",
    )


def _content() -> rx.Component:
    return page_column(
        page_header("Access tokens", "Personal tokens for the public API and the mosoo CLI."),
        card_section(
            "Create a token",
            "A token acts as you on every App you own. Give it a label that says where it is used.",
            _create_form(),
            _new_secret_callout(),
        ),
        card_section(
            "Your tokens",
            "Revoke a token you no longer use or may have leaked.",
            rx.cond(
                TokensState.tokens.length() > 0,
                rx.table.root(
                    rx.table.header(
                        rx.table.row(
                            *[
                                rx.table.column_header_cell(name)
                                for name in ("Label", "Token", "Source", "Created", "Last used", "")
                            ]
                        )
                    ),
                    rx.table.body(rx.foreach(TokensState.tokens, _token_row)),
                    width="100%",
                    variant="surface",
                ),
                rx.text(
                    "No tokens yet.", color_scheme="gray", size="2", data_testid="tokens-empty"
                ),
            ),
        ),
    )


def tokens_page() -> rx.Component:
    return console_shell(_content)
