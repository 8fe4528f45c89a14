"""The state of one environment's editor (`/apps/[app_id]/environments/[environment_id]`,
`new` for one not saved yet).

The text fields are uncontrolled: what is typed reaches the server once, in the Save event
(`form`), so a secret value is never held in a state var nor sent back to the browser. The
choices that change the form's shape (network policy, a variable's switches, the rows of
the variables table) are state. A refused save keeps everything typed: the form is only
re-mounted (`form_version`) with the saved revision after a save that went through."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import reflex as rx

from mosoo_core import environments
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.pages.environments.labels import POLICY_CHOICES
from mosoo_web.pages.environments.services import (
    EditorContent,
    RevisionRow,
    VariableRow,
    load_editor,
    save,
)
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_app_ids

NEW = "new"  # the route's environment id for an environment not created yet
# The keys of `field_errors`: the fields `InvalidInput.field` names (the name and the
# fields of a save); any other refusal shows next to the Save button (`form`).
ERROR_FIELDS = (
    "name",
    *(field.name for field in dataclasses.fields(environments.EnvironmentChanges)),
    "form",
)
POLICIES = tuple(value for value, _label, _description in POLICY_CHOICES)


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
    _next_key: int = 0

    @rx.var
    def is_new(self) -> bool:
        return not self.environment_id

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
    async def load(self) -> None:
        """After the App guard: the environment named in the URL, or an empty form (`new`)."""
        self.loaded, self.missing, self.saving = False, False, False
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
        return toast
