"""`/apps/[app_id]/providers`: the App's model providers and their (masked) keys.

A key typed here reaches the server once, in the save event, and goes straight into the vault:
no state var ever holds it, and after a save the form is re-mounted so the browser forgets it.
Editing fills the same form from the saved credential, never with its key (blank keeps it).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar

from mosoo_core import vault
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.network.outbound import PROVIDERS
from mosoo_web.components.dialogs import confirm_dialog, trash_button
from mosoo_web.components.forms import error_text, labelled
from mosoo_web.components.layout import app_page, card_section, console_shell, page_header
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import SessionState, current_app_ids

FORM_FIELDS = ("name", "provider", "base_url", "api_key", "models")
DEFAULT_PRESET = vault.ProviderKind.OPENAI.value
PRESET_BASE_URLS = {kind.value: preset.base_url for kind, preset in vault.PROVIDER_PRESETS.items()}
PRESET_LABELS = {kind.value: preset.label for kind, preset in vault.PROVIDER_PRESETS.items()}
# How Agents reach each preset: the model gateway's route for it (the key stays on the server).
GATEWAY_ROUTES = {
    "anthropic": "Agents call it through the gateway's Anthropic Messages API.",
    "openai": "Agents call it through the gateway's OpenAI-compatible API.",
}
PRESET_ROUTES = {
    kind.value: GATEWAY_ROUTES[preset.gateway_api]
    for kind, preset in vault.PROVIDER_PRESETS.items()
}
# A provider may list hundreds of models; the row shows the first ones.
SHOWN_MODELS = 20


@dataclass
class ProviderRow:
    id: str = ""
    name: str = ""
    provider_label: str = ""
    base_url: str = ""
    models: str = ""
    masked_key: str = ""
    is_default: bool = False
    delete_error: str = ""
    testing: bool = False
    test_ok: bool = False
    test_message: str = ""
    test_models: str = ""


def _row(view: vault.ProviderCredentialView) -> ProviderRow:
    return ProviderRow(
        id=view.id,
        name=view.name,
        provider_label=PRESET_LABELS.get(view.provider, view.provider),
        base_url=view.base_url,
        models=", ".join(view.models),
        masked_key=view.masked_key or "no key",
        is_default=view.is_default,
    )


def _models(raw: str) -> list[str]:
    # "a, b," is a natural way to type a list: blanks between commas are not model names.
    return [part.strip() for part in (raw or "").split(",") if part.strip()]


def _offered(models: list[str]) -> str:
    shown = ", ".join(models[:SHOWN_MODELS])
    more = len(models) - SHOWN_MODELS
    return f"{shown} and {more} more" if more > 0 else shown


def _test_connection(account_id: str, app_id: str, credential_id: str) -> vault.ConnectionResult:
    with session_scope() as db:
        return vault.check_provider_connection(db, account_id, app_id, credential_id)


class ProvidersState(rx.State):
    providers: rx.Field[list[ProviderRow]] = rx.field(default_factory=list)
    preset: rx.Field[str] = rx.field(DEFAULT_PRESET)
    # Bumped after a save: the add form is re-mounted empty, so the typed key is gone.
    form_version: rx.Field[int] = rx.field(0)
    # The credential being edited ("" while adding) and the values its form starts with.
    editing_id: rx.Field[str] = rx.field("")
    editing_name: rx.Field[str] = rx.field("")
    editing_provider: rx.Field[str] = rx.field("")
    form_name: rx.Field[str] = rx.field("")
    form_base_url: rx.Field[str] = rx.field("")
    form_models: rx.Field[str] = rx.field("")
    form_is_default: rx.Field[bool] = rx.field(False)
    name_error: rx.Field[str] = rx.field("")
    provider_error: rx.Field[str] = rx.field("")
    base_url_error: rx.Field[str] = rx.field("")
    api_key_error: rx.Field[str] = rx.field("")
    models_error: rx.Field[str] = rx.field("")

    @rx.var
    def preset_base_url(self) -> str:
        # Editing keeps the saved URL until another provider kind is chosen.
        if self.editing_id and self.preset == self.editing_provider:
            return self.form_base_url
        return PRESET_BASE_URLS.get(self.preset, "")

    @rx.var
    def preset_route(self) -> str:
        route = PRESET_ROUTES.get(self.preset, "")
        if self.preset == vault.ProviderKind.OLLAMA.value and not PROVIDERS.allowed():
            # Its preset URL is loopback: say up front what Test connection would refuse.
            route += (
                " On this machine it needs MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS=true on the"
                " server."
            )
        return route

    @rx.var
    def form_title(self) -> str:
        return f"Edit {self.editing_name}" if self.editing_id else "Add a provider"

    @rx.var
    def key_optional(self) -> bool:
        return not vault.PROVIDER_PRESETS[vault.ProviderKind(self.preset)].needs_key

    def _clear_errors(self) -> None:
        for field in FORM_FIELDS:
            setattr(self, f"{field}_error", "")

    async def _app(self) -> tuple[str, str, SessionState]:
        account_id, app_id = await current_app_ids(self)
        return account_id, app_id, await self.get_state(SessionState)

    def _list(self, account_id: str, app_id: str) -> None:
        with session_scope() as db:
            views = vault.list_provider_credentials(db, account_id, app_id)
        self.providers = [_row(view) for view in views]

    def _update_row(self, credential_id: str, **changes: Any) -> None:
        self.providers = [
            dataclasses.replace(row, **changes) if row.id == credential_id else row
            for row in self.providers
        ]

    def _reset_form(self) -> None:
        """An empty add form, re-mounted so the browser forgets what was typed."""
        self._clear_errors()
        self.preset = DEFAULT_PRESET
        self.editing_id = self.editing_name = self.editing_provider = ""
        self.form_name = self.form_base_url = self.form_models = ""
        self.form_is_default = False
        self.form_version += 1

    @event
    async def load(self) -> None:
        """After the App guard: the App's providers, and a fresh add form."""
        self._reset_form()
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            self.providers = []  # not found, or the guard has just sent the tab to /login
            return
        account_id, app_id, session = await self._app()
        try:
            self._list(account_id, app_id)
        except NotFound:
            session.app_missing = True
            self.providers = []

    @event
    def choose_preset(self, value: str) -> None:
        if value in PRESET_BASE_URLS:
            self.preset = value
            self.provider_error = ""
            self.api_key_error = ""

    @event
    async def edit(self, credential_id: str) -> EventSpec | None:
        """Fill the form with a saved provider (never its key)."""
        account_id, app_id, session = await self._app()
        try:
            with session_scope() as db:
                view = vault.get_provider_credential(db, account_id, app_id, credential_id)
        except NotFound:
            return self._gone(account_id, app_id, session)
        self._reset_form()
        self.editing_id, self.editing_name, self.editing_provider = (
            view.id,
            view.name,
            view.provider,
        )
        self.preset = view.provider
        self.form_name, self.form_base_url = view.name, view.base_url
        # The form's rule is "the first is the default model": keep the saved default first.
        models = [view.default_model] if view.default_model else []
        self.form_models = ", ".join(models + [m for m in view.models if m not in models])
        self.form_is_default = view.is_default
        return rx.scroll_to("provider-form")

    @event
    def cancel_edit(self) -> None:
        self._reset_form()

    @event
    async def save(self, form: dict[str, str]) -> EventSpec | None:
        """Add a provider, or save the one being edited (a blank key keeps the saved one).
        The key in `form` goes to the vault and nowhere else."""
        account_id, app_id, session = await self._app()
        self._clear_errors()
        data = vault.ProviderCredentialInput(
            name=form.get("name", ""),
            provider=self.preset,
            base_url=form.get("base_url", ""),
            api_key=form.get("api_key", ""),
            models=_models(form.get("models", "")),
            is_default=form.get("is_default", "") == "on",
        )
        try:
            with session_scope() as db:
                if self.editing_id:
                    saved = vault.update_provider_credential(
                        db, account_id, app_id, self.editing_id, data
                    )
                else:
                    saved = vault.create_provider_credential(db, account_id, app_id, data)
        except InvalidInput as error:
            field = error.field if error.field in FORM_FIELDS else "name"
            if error.field == "default_model":
                field = "models"
            setattr(self, f"{field}_error", error.message)
            return None
        except NotFound:
            if self.editing_id:
                self._reset_form()
                return self._gone(account_id, app_id, session)
            session.app_missing = True
            return None
        verb = "saved" if self.editing_id else "added"
        self._reset_form()
        self._list(account_id, app_id)
        return rx.toast.success(f"{saved.name} {verb}.")

    @event
    async def make_default(self, credential_id: str) -> EventSpec | None:
        account_id, app_id, session = await self._app()
        try:
            with session_scope() as db:
                made = vault.set_default_provider_credential(db, account_id, app_id, credential_id)
        except NotFound:
            return self._gone(account_id, app_id, session)
        self._list(account_id, app_id)
        return rx.toast.success(f"{made.name} is now the default.")

    @event
    async def delete(self, credential_id: str) -> EventSpec | None:
        account_id, app_id, session = await self._app()
        try:
            with session_scope() as db:
                vault.delete_provider_credential(db, account_id, app_id, credential_id)
        except Conflict as error:
            self._update_row(credential_id, delete_error=error.message)
            return None
        except NotFound:
            return self._gone(account_id, app_id, session)
        if self.editing_id == credential_id:
            self._reset_form()
        self._list(account_id, app_id)
        return rx.toast.success("Provider deleted.")

    @event(background=True)
    async def test_connection(self, credential_id: str) -> EventSpec | None:
        """Call the provider with the stored key (up to 10 s) and show the outcome on its row."""
        async with self:
            account_id, app_id, _session = await self._app()
            self._update_row(
                credential_id, testing=True, test_message="", test_models="", delete_error=""
            )
        try:
            result = await asyncio.to_thread(_test_connection, account_id, app_id, credential_id)
        except NotFound:
            async with self:
                account_id, app_id, session = await self._app()
                return self._gone(account_id, app_id, session)
        async with self:
            self._update_row(
                credential_id,
                testing=False,
                test_ok=result.ok,
                test_message=result.message,
                test_models=_offered(result.models),
            )
        return None

    def _gone(self, account_id: str, app_id: str, session: SessionState) -> EventSpec:
        try:
            self._list(account_id, app_id)
        except NotFound:
            session.app_missing = True
        return rx.toast.error("That provider no longer exists.")


def _delete_button(row: ObjectVar[ProviderRow]) -> rx.Component:
    return confirm_dialog(
        "Delete " + row.name.to(str) + "?",
        "Its key is destroyed. Agents that use this provider stop working until you choose another.",
        confirm="Delete",
        on_confirm=ProvidersState.delete(row.id),
        confirm_test_id="provider-delete-confirm",
        trigger=trash_button("Delete", "provider-delete"),
    )


def _provider_card(row: ObjectVar[ProviderRow]) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.icon("key-round", size=16, color=rx.color("accent", 11)),
                rx.text(row.name, size="3", weight="bold", data_testid="provider-name"),
                rx.badge(row.provider_label, variant="soft", color_scheme="gray"),
                rx.cond(
                    row.is_default,
                    rx.badge("Default", color_scheme="green", data_testid="provider-default-badge"),
                    rx.fragment(),
                ),
                rx.spacer(),
                rx.button(
                    "Test connection",
                    size="1",
                    variant="soft",
                    color_scheme="gray",
                    loading=row.testing,
                    on_click=ProvidersState.test_connection(row.id),
                    data_testid="provider-test",
                ),
                rx.button(
                    rx.icon("pencil", size=14),
                    "Edit",
                    size="1",
                    variant="soft",
                    on_click=ProvidersState.edit(row.id),
                    data_testid="provider-edit",
                ),
                rx.cond(
                    row.is_default,
                    rx.fragment(),
                    rx.button(
                        "Make default",
                        size="1",
                        variant="soft",
                        on_click=ProvidersState.make_default(row.id),
                        data_testid="provider-make-default",
                    ),
                ),
                _delete_button(row),
                align="center",
                width="100%",
                spacing="2",
            ),
            rx.hstack(
                rx.text("Base URL", size="1", color_scheme="gray", width="72px"),
                rx.code(row.base_url, size="1", data_testid="provider-base-url"),
                align="center",
            ),
            rx.hstack(
                rx.text("Key", size="1", color_scheme="gray", width="72px"),
                rx.code(row.masked_key, size="1", data_testid="provider-masked-key"),
                align="center",
            ),
            rx.hstack(
                rx.text("Models", size="1", color_scheme="gray", width="72px"),
                rx.text(
                    cond_value(row.models != "", row.models, "none listed"),
                    size="2",
                    data_testid="provider-models",
                ),
                align="center",
            ),
            error_text(row.delete_error, "provider-delete-error"),
            rx.cond(
                row.test_message != "",
                rx.vstack(
                    rx.text(
                        row.test_message,
                        size="2",
                        color_scheme=cond_value(row.test_ok, "green", "red"),
                        data_testid="provider-test-result",
                    ),
                    rx.cond(
                        row.test_models != "",
                        rx.text(
                            "Offered: " + row.test_models.to(str),
                            size="1",
                            color_scheme="gray",
                            data_testid="provider-test-models",
                        ),
                        rx.fragment(),
                    ),
                    spacing="1",
                ),
                rx.fragment(),
            ),
            spacing="2",
            width="100%",
        ),
        width="100%",
        data_testid="provider-row",
    )


def _form_buttons() -> rx.Component:
    return rx.cond(
        ProvidersState.editing_id != "",
        rx.hstack(
            rx.button("Save", type="submit", size="3", data_testid="provider-save"),
            rx.button(
                "Cancel",
                type="button",
                size="3",
                variant="soft",
                color_scheme="gray",
                on_click=ProvidersState.cancel_edit,
                data_testid="provider-edit-cancel",
            ),
            spacing="3",
        ),
        rx.button("Add provider", type="submit", size="3", data_testid="provider-add-submit"),
    )


def _provider_form() -> rx.Component:
    return rx.form(
        rx.vstack(
            labelled(
                "Provider",
                rx.select.root(
                    rx.select.trigger(width="100%", data_testid="provider-preset"),
                    rx.select.content(
                        *[
                            rx.select.item(label, value=kind)
                            for kind, label in PRESET_LABELS.items()
                        ],
                    ),
                    value=ProvidersState.preset,
                    on_change=ProvidersState.choose_preset,
                ),
                error=ProvidersState.provider_error,
                test_id="provider",
                hint=rx.text(
                    ProvidersState.preset_route,
                    size="1",
                    color_scheme="gray",
                    data_testid="provider-route",
                ),
            ),
            labelled(
                "Name",
                rx.input(
                    name="name",
                    default_value=ProvidersState.form_name,
                    placeholder="e.g. OpenAI production",
                    max_length=80,
                    width="100%",
                    data_testid="provider-name-input",
                ),
                error=ProvidersState.name_error,
                test_id="provider-name",
            ),
            labelled(
                "Base URL",
                rx.input(
                    name="base_url",
                    default_value=ProvidersState.preset_base_url,
                    # A new preset re-mounts the field with that preset's URL.
                    key=ProvidersState.preset,
                    placeholder="https://your-endpoint.example.com/v1",
                    max_length=500,
                    width="100%",
                    data_testid="provider-base-url-input",
                ),
                error=ProvidersState.base_url_error,
                test_id="provider-base-url",
            ),
            labelled(
                "API key",
                rx.input(
                    name="api_key",
                    type="password",
                    auto_complete="new-password",
                    placeholder=cond_value(
                        ProvidersState.editing_id != "",
                        "Leave blank to keep the saved key",
                        cond_value(ProvidersState.key_optional, "Optional", "Paste the key"),
                    ),
                    width="100%",
                    data_testid="provider-key-input",
                ),
                error=ProvidersState.api_key_error,
                test_id="provider-key",
                hint=rx.text(
                    "Stored encrypted; shown afterwards only by its last four characters.",
                    size="1",
                    color_scheme="gray",
                ),
            ),
            labelled(
                "Models",
                rx.input(
                    name="models",
                    default_value=ProvidersState.form_models,
                    placeholder="gpt-4o-mini, gpt-4o",
                    width="100%",
                    data_testid="provider-models-input",
                ),
                error=ProvidersState.models_error,
                test_id="provider-models",
                hint=rx.text(
                    "Comma separated; the first is the default model.",
                    size="1",
                    color_scheme="gray",
                ),
            ),
            rx.checkbox(
                "Make this the App's default provider",
                name="is_default",
                default_checked=ProvidersState.form_is_default,
                data_testid="provider-default-checkbox",
            ),
            _form_buttons(),
            width="100%",
            spacing="3",
        ),
        key=ProvidersState.form_version,
        id="provider-form",
        on_submit=ProvidersState.save,
        reset_on_submit=False,
        width="100%",
    )


def _content() -> rx.Component:
    return app_page(
        page_header("Providers", SessionState.current_app_name),
        card_section(
            "Model providers",
            "The keys your Agents use to call models. Keys stay on the server: Agents get a short-lived grant, never the key.",
            rx.cond(
                ProvidersState.providers.length() > 0,
                rx.vstack(
                    rx.foreach(ProvidersState.providers, _provider_card), width="100%", spacing="2"
                ),
                rx.text(
                    "No providers yet. Add one below.",
                    color_scheme="gray",
                    size="2",
                    data_testid="providers-empty",
                ),
            ),
        ),
        card_section(
            ProvidersState.form_title,
            "Pick a preset or any OpenAI-compatible endpoint.",
            _provider_form(),
        ),
    )


def providers_page() -> rx.Component:
    return console_shell(_content)
