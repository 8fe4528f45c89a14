"""The state of one environment's editor (`/apps/[app_id]/environments/[environment_id]`,
`new` for one not saved yet).

The text fields are uncontrolled: what is typed reaches the server once, in the Save event
(`form`), so a secret value is never held in a state var nor sent back to the browser. The
choices that change the form's shape (network policy, a variable's switches, the rows of
the variables table) are state. A refused save keeps everything typed: the form is only
re-mounted (`form_version`) with the saved revision after a save that went through.

The current revision's package build (`build_*`) is followed while it is queued or building:
`watch_build` reads it about every second until it settles or the tab leaves the page."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import reflex as rx

from mosoo_core import environments
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_web.pages.environments.labels import POLICY_CHOICES
from mosoo_web.pages.environments.services import (
    BuildStatus,
    EditorContent,
    RevisionRow,
    VariableRow,
    build_status,
    load_editor,
    rebuild,
    save,
)
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_app_ids, tab_signed_out
from mosoo_web.state.thread_chat import DISCONNECTED_GRACE_SECONDS, client_connected

NEW = "new"  # the route's environment id for an environment not created yet
# The keys of `field_errors`: the fields `InvalidInput.field` names (the name and the
# fields of a save); any other refusal shows next to the Save button (`form`).
ERROR_FIELDS = (
    "name",
    *(field.name for field in dataclasses.fields(environments.EnvironmentChanges)),
    "form",
)
POLICIES = tuple(value for value, _label, _description in POLICY_CHOICES)
BUILD_POLL_SECONDS = 1.0  # how often an open editor re-reads a queued or building build


def _lines(raw: Any) -> list[str]:
    return [line.strip() for line in str(raw or "").splitlines() if line.strip()]


class EnvironmentEditorState(rx.State):
    environment_id: rx.Field[str] = rx.field("")  # "" while it is new
    missing: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    name: rx.Field[str] = rx.field("")
    is_default: rx.Field[bool] = rx.field(False)
    revision: rx.Field[int] = rx.field(0)
    # Bumped when the form shows a (new) saved revision: the uncontrolled fields re-mount.
    form_version: rx.Field[int] = rx.field(0)
    form_pip: rx.Field[str] = rx.field("")
    form_npm: rx.Field[str] = rx.field("")
    form_setup_script: rx.Field[str] = rx.field("")
    form_allowed_hosts: rx.Field[str] = rx.field("")
    network_policy: rx.Field[str] = rx.field("none")
    allow_package_indexes: rx.Field[bool] = rx.field(False)
    variables: rx.Field[list[VariableRow]] = rx.field(default_factory=list)
    revisions: rx.Field[list[RevisionRow]] = rx.field(default_factory=list)
    # Why the last save was refused, by field (`ERROR_FIELDS`).
    field_errors: rx.Field[dict[str, str]] = rx.field(default_factory=dict)
    saving: rx.Field[bool] = rx.field(False)
    # The current revision's build: "" status without packages (no Build panel).
    build_status: rx.Field[str] = rx.field("")
    build_log: rx.Field[str] = rx.field("")
    build_error: rx.Field[str] = rx.field("")
    build_finished: rx.Field[str] = rx.field("")
    build_message: rx.Field[str] = rx.field("")  # why the last Rebuild was refused
    rebuilding: rx.Field[bool] = rx.field(False)
    _next_key: int = 0
    # Each load and each new build watcher bumps it; an older watcher sees that and ends.
    _build_generation: int = 0

    @rx.var
    def is_new(self) -> bool:
        return not self.environment_id

    @rx.var
    def build_active(self) -> bool:
        return self.build_status in ("queued", "building")

    def _show_build(self, build: BuildStatus) -> None:
        # Assigned only when changed: a var is re-sent whole, and the log can be long.
        if self.build_status != build.status:
            self.build_status = build.status
        if self.build_log != build.log:
            self.build_log = build.log
        if self.build_error != build.error:
            self.build_error = build.error
        if self.build_finished != build.finished:
            self.build_finished = build.finished

    def _apply(self, content: EditorContent) -> None:
        self.environment_id, self.name = content.id, content.name
        self.is_default, self.revision = content.is_default, content.revision
        self.form_pip, self.form_npm = content.pip, content.npm
        self.form_setup_script = content.setup_script
        self.form_allowed_hosts = content.allowed_hosts
        self.network_policy = content.network_policy
        self.allow_package_indexes = content.allow_package_indexes
        self.variables = content.variables
        self._next_key = len(content.variables)
        self.revisions = content.revisions
        self.field_errors = {}
        self.form_version += 1
        self.build_message = ""
        self._show_build(
            BuildStatus(
                status=content.build_status,
                log=content.build_log,
                error=content.build_error,
                finished=content.build_finished,
            )
        )

    def _blank(self) -> None:
        self._apply(
            EditorContent(
                id="",
                name="",
                is_default=False,
                revision=0,
                pip="",
                npm="",
                setup_script="",
                variables=[],
                network_policy="none",
                allowed_hosts="",
                allow_package_indexes=False,
            )
        )

    @event
    async def load(self) -> Any:
        """After the App guard: the environment named in the URL, or an empty form (`new`);
        a build still queued or building is followed."""
        self.loaded, self.missing, self.saving = False, False, False
        self.rebuilding = False
        self._build_generation += 1  # the watcher of what this tab showed before ends
        self._blank()
        environment_id = str(self.router.page.params.get("environment_id", "") or "")
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            return  # not found, or the guard has just sent the tab to /login
        account_id, app_id = await current_app_ids(self)
        if environment_id != NEW:
            try:
                self._apply(
                    await asyncio.to_thread(load_editor, account_id, app_id, environment_id)
                )
            except NotFound:
                self.missing = True
        self.loaded = True
        return EnvironmentEditorState.watch_build if self.build_active else None

    # --- the choices that change the form's shape ---

    @event
    def set_policy(self, value: str | list[str]) -> None:
        if isinstance(value, str) and value in POLICIES:
            self.network_policy = value

    @event
    def set_package_indexes(self, value: bool) -> None:
        self.allow_package_indexes = bool(value)

    @event
    def add_variable(self) -> None:
        self.variables = [*self.variables, VariableRow(key=f"v{self._next_key}")]
        self._next_key += 1

    @event
    def remove_variable(self, key: str) -> None:
        self.variables = [row for row in self.variables if row.key != key]

    def _change_variable(self, key: str, **changes: Any) -> None:
        self.variables = [
            dataclasses.replace(row, **changes) if row.key == key else row for row in self.variables
        ]

    @event
    def set_variable_secret(self, key: str, value: bool) -> None:
        self._change_variable(key, secret=bool(value))

    @event
    def set_variable_setup_only(self, key: str, value: bool) -> None:
        self._change_variable(key, setup_only=bool(value))

    # --- saving ---

    def _variables(self, form: dict[str, Any]) -> list[environments.VariableInput]:
        """The table's rows as the service takes them; a row left blank is skipped, and an
        empty value of a stored secret keeps it (`value=None`)."""
        given: list[environments.VariableInput] = []
        for row in self.variables:
            name = str(form.get(f"var-name-{row.key}", "")).strip()
            value = str(form.get(f"var-value-{row.key}", ""))
            if not name and not value and not row.stored_secret:
                continue
            keep = row.stored_secret and value == ""
            given.append(
                environments.VariableInput(
                    name=name,
                    value=None if keep else value,
                    secret=row.secret,
                    setup_only=row.setup_only,
                )
            )
        return given

    def _changes(self, form: dict[str, Any]) -> environments.EnvironmentChanges:
        limited = self.network_policy == "limited"
        return environments.EnvironmentChanges(
            pip=_lines(form.get("pip")),
            npm=_lines(form.get("npm")),
            setup_script=str(form.get("setup_script", "")),
            variables=self._variables(form),
            network_policy=self.network_policy,
            # Hidden (and not sent) unless limited: leaving limited drops its list.
            allowed_hosts=_lines(form.get("allowed_hosts")) if limited else [],
            allow_package_indexes=self.allow_package_indexes and limited,
        )

    @event
    async def save(self, form: dict[str, Any]) -> Any:
        """One save: one new revision (none when nothing changed), shown in a toast. A
        refusal shows next to the field it names and the form keeps what was typed."""
        account_id, app_id = await current_app_ids(self)
        if self.saving or self.missing:
            return None
        self.field_errors = {}
        self.saving = True
        was_new = self.is_new
        try:
            saved = await asyncio.to_thread(
                save,
                account_id,
                app_id,
                self.environment_id,
                str(form.get("name", "")),
                self._changes(form),
            )
        except InvalidInput as error:
            field = error.field if error.field in ERROR_FIELDS else "form"
            self.field_errors = {field: error.message}
            return None
        except NotFound:
            self.missing = True
            return None
        finally:
            self.saving = False
        if not saved.changed:
            return rx.toast.info("Nothing changed: no new revision.")
        toast = rx.toast.success(f"Saved revision {saved.number}: {saved.summary}")
        if was_new:
            # The page of the environment now that it exists; its load shows the revision.
            return [
                rx.redirect(f"/apps/{app_id}/environments/{saved.content.id}", replace=True),
                toast,
            ]
        self._apply(saved.content)
        return [toast, EnvironmentEditorState.watch_build] if self.build_active else toast

    # --- the packages' build ---

    @event
    async def rebuild(self) -> Any:
        """Queue the current revision's packages again; a refusal (a build in progress, no
        packages) shows under the Build panel."""
        account_id, app_id = await current_app_ids(self)
        if self.rebuilding or self.missing or self.is_new:
            return None
        self.build_message = ""
        self.rebuilding = True
        try:
            build = await asyncio.to_thread(rebuild, account_id, app_id, self.environment_id)
        except Conflict as error:
            self.build_message = error.message
            return None
        except NotFound:
            self.missing = True
            return None
        finally:
            self.rebuilding = False
        self._show_build(build)
        return [rx.toast.info("Rebuild queued."), EnvironmentEditorState.watch_build]

    @event(background=True)
    async def watch_build(self) -> None:
        """Re-read the build about every second while it is queued or building. Ends when it
        settles, when the tab leaves the page or loads it again (a newer watcher), or when
        the tab has been gone for a while."""
        async with self:
            self._build_generation += 1
            generation = self._build_generation
            path = self.router.url.path
            token = self.router.session.client_token
            environment_id = self.environment_id
            account_id, app_id = await current_app_ids(self)
        if not environment_id:
            return
        gone_since: float | None = None
        while True:
            await asyncio.sleep(BUILD_POLL_SECONDS)
            async with self:
                if self._build_generation != generation or self.router.url.path != path:
                    return
                # Stops with the session: quietly when the tab was already signed out,
                # by raising SignedOut (the tab goes to /login) when it ended unnoticed.
                if await tab_signed_out(self):
                    return
            if await client_connected(token):
                gone_since = None
            elif gone_since is None:
                gone_since = time.monotonic()
            elif time.monotonic() - gone_since >= DISCONNECTED_GRACE_SECONDS:
                return
            try:
                build = await asyncio.to_thread(build_status, account_id, app_id, environment_id)
            except NotFound:  # deleted meanwhile (another tab)
                async with self:
                    if self._build_generation == generation:
                        self.missing = True
                return
            async with self:
                if self._build_generation != generation:
                    return
                self._show_build(build)
            if not build.active:
                return
