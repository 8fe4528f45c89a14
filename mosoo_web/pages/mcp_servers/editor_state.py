"""The state of one MCP server's editor (`/apps/[app_id]/mcp/[server_id]`, `new` for one not
added yet): its form, Test connection with the tool browser, and OAuth's Connect.

The text fields are uncontrolled: what is typed reaches the server once, in the Save event
(`form`), so a token, a header value or a client secret is never held in a state var nor
sent back to the browser. The choices that change the form's shape (authentication, the
enabled switch) are state. A refused save keeps everything typed: the form is re-mounted
(`form_version`) with the saved server only after a save that went through.

The OAuth callback comes back here with `?oauth=connected` or `?oauth=failed&reason=…`
(`mosoo_web/api/mcp_oauth.py`): the outcome shows in a callout and a toast."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import reflex as rx

from mosoo_core import mcp
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.api.mcp_oauth import redirect_uri
from mosoo_web.pages.mcp_servers.services import (
    AUTH_KINDS,
    EditorContent,
    StoredFields,
    TestState,
    ToolRow,
    changes_from_form,
    disconnect,
    load_editor,
    oauth_notice,
    save,
    test_connection,
)
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_app_ids, hard_navigate

NEW = "new"  # the route's server id for a server not added yet
# The keys of `field_errors`: the fields `InvalidInput.field` names; any other refusal
# shows next to the Save button (`form`).
ERROR_FIELDS = (*(f.name for f in dataclasses.fields(mcp.McpServerChanges)), "form")
# Drops `?oauth=…` from the address once read, so a reload does not say it again.
_CLEAN_URL = "window.history.replaceState(null, '', window.location.pathname)"


class McpServerEditorState(rx.State):
    server_id: rx.Field[str] = rx.field("")  # "" while it is new
    missing: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    name: rx.Field[str] = rx.field("")
    # Bumped when the form shows a (newly) saved server: the uncontrolled fields re-mount.
    form_version: rx.Field[int] = rx.field(0)
    form_name: rx.Field[str] = rx.field("")
    form_description: rx.Field[str] = rx.field("")
    form_url: rx.Field[str] = rx.field("")
    form_oauth_client_id: rx.Field[str] = rx.field("")
    form_oauth_scopes: rx.Field[str] = rx.field("")
    form_oauth_authorization_endpoint: rx.Field[str] = rx.field("")
    form_oauth_token_endpoint: rx.Field[str] = rx.field("")
    auth_kind: rx.Field[str] = rx.field("none")
    stored_auth_kind: rx.Field[str] = rx.field("")  # "" while it is new
    enabled: rx.Field[bool] = rx.field(True)
    stored_enabled: rx.Field[bool] = rx.field(True)
    # Whether a credential is stored (never the credential itself).
    has_credential: rx.Field[bool] = rx.field(False)
    header_names: rx.Field[list[str]] = rx.field(default_factory=list)
    oauth_has_client_secret: rx.Field[bool] = rx.field(False)
    oauth_connected: rx.Field[bool] = rx.field(False)
    oauth_connected_at: rx.Field[str] = rx.field("")
    authorize_path: rx.Field[str] = rx.field("")
    used_by: rx.Field[list[str]] = rx.field(default_factory=list)
    # Why the last save was refused, by field (`ERROR_FIELDS`).
    field_errors: rx.Field[dict[str, str]] = rx.field(default_factory=dict)
    saving: rx.Field[bool] = rx.field(False)
    # The last Test connection: untested, ok or failed, when, why, and the tools it found.
    test_state: rx.Field[str] = rx.field("untested")
    tested: rx.Field[str] = rx.field("")
    test_error: rx.Field[str] = rx.field("")
    tools: rx.Field[list[ToolRow]] = rx.field(default_factory=list)
    testing: rx.Field[bool] = rx.field(False)
    # How the last OAuth round trip went ("" for none).
    oauth_message: rx.Field[str] = rx.field("")
    oauth_ok: rx.Field[bool] = rx.field(False)
    redirect_uri: rx.Field[str] = rx.field("")  # what to register with the provider

    @rx.var
    def is_new(self) -> bool:
        return not self.server_id

    @rx.var
    def credential_stored(self) -> bool:
        """A stored bearer token or headers the form keeps when left empty (only while the
        authentication kind is the stored one: a new kind needs its own)."""
        return self.has_credential and self.auth_kind == self.stored_auth_kind

    def _show_test(self, test: TestState) -> None:
        self.test_state, self.tested, self.test_error = test.state, test.tested, test.error
        self.tools = test.tools

    def _apply(self, content: EditorContent) -> None:
        self.server_id, self.name = content.id, content.name
        self.form_name, self.form_description = content.name, content.description
        self.form_url = content.url
        self.form_oauth_client_id = content.oauth_client_id
        self.form_oauth_scopes = content.oauth_scopes
        self.form_oauth_authorization_endpoint = content.oauth_authorization_endpoint
        self.form_oauth_token_endpoint = content.oauth_token_endpoint
        self.auth_kind = self.stored_auth_kind = content.auth_kind
        self.enabled = self.stored_enabled = content.enabled
        self.has_credential = content.has_credential
        self.header_names = content.header_names
        self.oauth_has_client_secret = content.oauth_has_client_secret
        self.oauth_connected = content.oauth_connected
        self.oauth_connected_at = content.oauth_connected_at
        self.authorize_path = content.authorize_path
        self.used_by = content.used_by
        self.field_errors = {}
        self.form_version += 1
        self._show_test(content.test)

    def _blank(self) -> None:
        self._apply(
            EditorContent(
                id="",
                name="",
                description="",
                url="",
                auth_kind="none",
                enabled=True,
                has_credential=False,
                header_names=[],
                oauth_client_id="",
                oauth_has_client_secret=False,
                oauth_scopes="",
                oauth_authorization_endpoint="",
                oauth_token_endpoint="",
                oauth_connected=False,
                oauth_connected_at="",
                authorize_path="",
                used_by=[],
                test=TestState(state="untested", tested="", error="", tools=[]),
            )
        )
        self.stored_auth_kind = ""

    def _stored(self) -> StoredFields | None:
        if self.is_new:
            return None
        return StoredFields(
            name=self.form_name,
            description=self.form_description,
            url=self.form_url,
            auth_kind=self.stored_auth_kind,
            enabled=self.stored_enabled,
            oauth_client_id=self.form_oauth_client_id,
            oauth_scopes=self.form_oauth_scopes,
            oauth_authorization_endpoint=self.form_oauth_authorization_endpoint,
            oauth_token_endpoint=self.form_oauth_token_endpoint,
        )

    @event
    async def load(self) -> Any:
        """After the App guard: the server named in the URL, or an empty form (`new`); the
        answer of an OAuth round trip, when the callback sent the browser here."""
        self.loaded, self.missing, self.saving, self.testing = False, False, False, False
        self.oauth_message, self.oauth_ok = "", False
        self.redirect_uri = redirect_uri()
        self._blank()
        server_id = str(self.router.page.params.get("server_id", "") or "")
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            return None  # not found, or the guard has just sent the tab to /login
        account_id, app_id = await current_app_ids(self)
        if server_id != NEW:
            try:
                self._apply(await asyncio.to_thread(load_editor, account_id, app_id, server_id))
            except NotFound:
                self.missing = True
        self.loaded = True
        query = self.router.url.query_parameters
        notice = oauth_notice(str(query.get("oauth", "") or ""), str(query.get("reason", "") or ""))
        if notice is None or self.missing:
            return None
        self.oauth_message, self.oauth_ok = notice
        toast = rx.toast.success(notice[0]) if notice[1] else rx.toast.error(notice[0])
        return [toast, rx.call_script(_CLEAN_URL)]

    # --- the choices that change the form's shape ---

    @event
    def set_auth_kind(self, value: str | list[str]) -> None:
        if isinstance(value, str) and value in AUTH_KINDS:
            self.auth_kind = value

    @event
    def set_enabled(self, value: bool) -> None:
        self.enabled = bool(value)

    # --- saving ---

    @event
    async def save(self, form: dict[str, Any]) -> Any:
        """Add the server, or save what the form changed. A refusal shows next to the field
        it names and the form keeps what was typed."""
        account_id, app_id = await current_app_ids(self)
        if self.saving or self.missing:
            return None
        self.field_errors = {}
        self.saving = True
        try:
            changes = changes_from_form(form, self._stored(), self.auth_kind, self.enabled)
            saved = await asyncio.to_thread(save, account_id, app_id, self.server_id, changes)
        except InvalidInput as error:  # FieldConflict too: both name their field
            field = error.field if error.field in ERROR_FIELDS else "form"
            self.field_errors = {field: error.message}
            return None
        except NotFound:
            self.missing = True
            return None
        finally:
            self.saving = False
        if saved.created:
            # The page of the server now that it exists; its load shows it.
            return [
                rx.redirect(f"/apps/{app_id}/mcp/{saved.content.id}", replace=True),
                rx.toast.success(f"Added {saved.content.name}. Test connection to see its tools."),
            ]
        self._apply(saved.content)
        return rx.toast.success("Saved.")

    # --- Test connection and OAuth ---

    @event(background=True)
    async def test_connection(self) -> Any:
        """Initialize a session with the server (saved settings, up to 20 s) and list its
        tools: the tool browser shows them, or why it failed."""
        async with self:
            account_id, app_id = await current_app_ids(self)
            if self.testing or not self.server_id or self.missing:
                return None
            self.testing = True
            server_id = self.server_id
        try:
            tested = await asyncio.to_thread(test_connection, account_id, app_id, server_id)
        except NotFound:
            async with self:
                self.testing = False
                self.missing = True
            return None
        async with self:
            self.testing = False
            if self.server_id != server_id:  # the tab moved on meanwhile
                return None
            self._show_test(tested.content.test)
            self.used_by = tested.content.used_by
        if tested.ok:
            count = len(tested.content.test.tools)
            return rx.toast.success(f"Connected: {count} tool{'' if count == 1 else 's'}.")
        return rx.toast.error(tested.error or "The test failed.")

    @event
    async def connect(self) -> Any:
        """OAuth: off to the authorization server (a full page load: the API endpoint
        answers a redirect), which sends the browser back here."""
        await current_app_ids(self)  # signed-out tabs go to /login instead
        if self.authorize_path and self.stored_auth_kind == "oauth":
            return hard_navigate(self.authorize_path)
        return None

    @event
    async def disconnect(self) -> Any:
        account_id, app_id = await current_app_ids(self)
        if not self.server_id:
            return None
        try:
            content = await asyncio.to_thread(disconnect, account_id, app_id, self.server_id)
        except NotFound:
            self.missing = True
            return None
        self._apply(content)
        self.oauth_message = ""
        return rx.toast.info("Disconnected: the OAuth tokens are forgotten.")
