"""`/apps/[app_id]/agents/[agent_id]`: Preview, the Agent's configuration beside a live test chat.

Streaming: one background watcher per open page follows the current thread. It notes the
Redis stream's last entry id, reads the event log from the database, then follows the
stream from that id (skipping seqs it has seen, going back to the database on a gap and
every couple of seconds when the stream is quiet). Events are folded into a local
`Transcript` and pushed to the state at most every 100 ms: the settled items in `items`
(re-sent only when an item settles or a tool card / permission changes) and the text still
streaming in `live_text` (small, changes per batch). The thread id sits in the URL
(`?thread=`) so a reload re-opens it and replays everything so far.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import reflex as rx

from mosoo_core import agents, sessions, vault
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, MosooError, NotFound
from mosoo_core.logs import get_logger
from mosoo_core.runtime import pets
from mosoo_core.runtime.sandbox import SandboxError
from mosoo_core.sessions import actions
from mosoo_web.components.chat import transcript_view
from mosoo_web.components.composer import chat_composer
from mosoo_web.components.layout import console_shell, missing_card
from mosoo_web.components.versions import VersionsState, publish_controls
from mosoo_web.pages.app_settings import not_found_card
from mosoo_web.state.session import SessionState, current_account_id
from mosoo_web.state.thread_chat import ThreadChat, thread_url_script

log = get_logger(__name__)

FLUSH_SECONDS = 0.1  # push deltas to the browser at most this often
QUIET_RECHECK_SECONDS = 2.0  # with a quiet stream, look at the database this often
DISCONNECTED_GRACE_SECONDS = 30.0  # a closed tab stops its watcher after this long
NO_PROVIDER = "none"
TOOL_POLICIES = ("off", "allow", "ask")
TOOL_DESCRIPTIONS = {
    "bash": "Run shell commands",
    "read": "Read files",
    "write": "Create and overwrite files",
    "edit": "Change parts of files",
    "glob": "Find files by name",
    "grep": "Search inside files",
}
FIELD_LABELS = {
    "runtime": "Runtime",
    "provider_credential_id": "Provider key",
    "model": "Model",
    "system_prompt": "System prompt",
    "name": "Name",
    "kind": "Kind",
    "tools": "Tools",
    "description": "Description",
    "provider_options": "Provider options",
    "environment_id": "Environment",
    "skills": "Skills",
    "mcp_servers": "MCP servers",
}
FORM_ERROR_FIELDS = {
    "name": "name_error",
    "description": "description_error",
    "temperature": "temperature_error",
    "max_tokens": "max_tokens_error",
    "reasoning_effort": "reasoning_effort_error",
    "provider_options": "provider_options_error",
    "provider_credential_id": "provider_error",
    "model": "model_error",
    "system_prompt": "system_prompt_error",
    "kind": "kind_error",
    "tools": "tools_error",
    "runtime": "runtime_error",
    "environment_id": "environment_error",
    "skills": "skills_error",
    "mcp_servers": "mcp_servers_error",
}
# The element (id) a readiness blocker's "Fix" button scrolls to and focuses.
FIELD_TARGETS = {name: "field-" + name.replace("_", "-") for name in FIELD_LABELS}
SAVE_DEBOUNCE_MS = 800  # text fields save this long after typing stops (and on blur)
DEFAULT_ENVIRONMENT = "default"  # the environment select's value for "no environment bound"
DEFAULT_EFFORT = "default"  # the select's value for "no reasoning_effort key"
_AGENT_PATH = re.compile(r"/apps/([^/]+)/agents/([^/?#]+)")


@dataclass
class ProviderOption:
    id: str = ""
    name: str = ""
    models: list[str] = field(default_factory=list)
    is_default: bool = False


@dataclass
class BlockerRow:
    code: str = ""
    label: str = ""
    message: str = ""
    target: str = ""  # the id of the field that fixes it


@dataclass(frozen=True)
class _AgentForm:
    name: str
    description: str
    temperature: str
    max_tokens: str
    reasoning_effort: str
    runtime_label: str
    kind: str
    provider_id: str
    model: str
    system_prompt: str
    tools: dict[str, str]
    providers: list[ProviderOption]
    blockers: list[BlockerRow]
    warnings: list[BlockerRow]
    runtime: str
    capabilities: list[str]
    environment_id: str
    skills: list[str]
    mcp_servers: list[str]


@dataclass(frozen=True)
class _Saved:
    """What the form shows after one autosave: the cleaned value and fresh readiness."""

    agent: agents.AgentView
    blockers: list[BlockerRow]
    warnings: list[BlockerRow]


# --- services, as the console calls them (run in a worker thread) ------------------------------


def _rows(items: list[agents.Blocker]) -> list[BlockerRow]:
    return [
        BlockerRow(
            code=b.code, label=FIELD_LABELS.get(b.field, b.field), message=b.message,
            target=FIELD_TARGETS.get(b.field, ""),
        )
        for b in items
    ]


def _blocker_rows(readiness: agents.Readiness) -> list[BlockerRow]:
    return _rows(readiness.blockers)


def _load_agent(account_id: str, app_id: str, agent_id: str) -> _AgentForm:
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        credentials = vault.list_provider_credentials(db, account_id, app_id)
        readiness = agents.readiness(db, agent)
    runtime = agents.RUNTIMES.get(agent.runtime)
    options = agent.provider_options
    effort = options.get("reasoning_effort")
    return _AgentForm(
        name=agent.name,
        description=agent.description,
        temperature="" if options.get("temperature") is None else str(options["temperature"]),
        max_tokens="" if options.get("max_tokens") is None else str(options["max_tokens"]),
        reasoning_effort=effort if effort in agents.REASONING_EFFORTS else DEFAULT_EFFORT,
        runtime_label=runtime.label if runtime else agent.runtime,
        kind=agent.kind,
        provider_id=agent.provider_credential_id or NO_PROVIDER,
        model=agent.model,
        system_prompt=agent.system_prompt,
        tools={tool: agent.tools.get(tool, "off") for tool in agents.BUILTIN_TOOLS},
        providers=[
            ProviderOption(id=c.id, name=c.name, models=list(c.models), is_default=c.is_default) for c in credentials
        ],
        blockers=_blocker_rows(readiness),
        warnings=_rows(readiness.warnings),
        runtime=agent.runtime,
        capabilities=sorted(runtime.capabilities) if runtime else [],
        environment_id=agent.environment_id or DEFAULT_ENVIRONMENT,
        skills=list(agent.skills),
        mcp_servers=list(agent.mcp_servers),
    )


def _save_fields(account_id: str, app_id: str, agent_id: str, changes: dict[str, Any]) -> _Saved:
    """One autosave: `update_agent` with the changed field(s), then readiness."""
    with session_scope() as db:
        agent = agents.update_agent(db, account_id, app_id, agent_id, **changes)
        readiness = agents.readiness(db, agent)
    return _Saved(agent=agent, blockers=_blocker_rows(readiness), warnings=_rows(readiness.warnings))


def _save_option(account_id: str, app_id: str, agent_id: str, key: str, value: Any) -> _Saved:
    """Set one provider option (None removes it); the Agent's other options stay."""
    with session_scope() as db:
        current = agents.get_agent(db, account_id, app_id, agent_id).provider_options
        agent = agents.update_agent(db, account_id, app_id, agent_id, provider_options={**current, key: value})
        readiness = agents.readiness(db, agent)
    return _Saved(agent=agent, blockers=_blocker_rows(readiness), warnings=_rows(readiness.warnings))


def _parse_option(key: str, raw: str) -> tuple[Any, str]:
    """The typed value of a provider option field (None: empty, use the provider's default)
    and an error when it does not parse. Ranges are checked by `update_agent`."""
    text = (raw or "").strip()
    if not text:
        return None, ""
    try:
        return (float(text) if key == "temperature" else int(text)), ""
    except ValueError:
        if key == "temperature":
            return None, "Temperature is a number from 0 to 2."
        return None, f"Max tokens is a whole number from 1 to {agents.MAX_TOKENS_LIMIT:,}."


def _pet_status(account_id: str, app_id: str, agent_id: str) -> list[str] | None:
    """The labels of the changes pending for the Agent's Pet sandbox, or None when it has
    none. A sandbox backend that cannot be asked counts as no sandbox (logged)."""
    try:
        status = pets.pet_sandbox_status(account_id, app_id, agent_id)
    except (SandboxError, OSError) as error:
        log.warning("preview.pet_status_failed", agent_id=agent_id, error=str(error)[:300])
        return None
    if not status.exists:
        return None
    return [FIELD_LABELS.get(name, name) for name in status.pending]


def _thread_of_agent(account_id: str, agent_id: str, thread_id: str) -> bool:
    with session_scope() as db:
        try:
            return sessions.get_session(db, account_id, thread_id).agent_id == agent_id
        except NotFound:
            return False


def _send_message(
    account_id: str, agent_id: str, thread_id: str, text: str, file_ids: list[str] | None = None
) -> str:
    """Store the message (starting a Preview thread, which runs the draft, when there is
    none), then hand the run to the worker. Returns the thread id."""
    if thread_id:
        actions.send_and_dispatch(account_id, thread_id, text, file_ids=file_ids or ())
        return thread_id
    started = actions.start_thread(account_id, agent_id, purpose="preview", message=text, file_ids=file_ids or ())
    return started.thread.id


class PreviewState(ThreadChat, rx.State):
    # --- the agent form ---
    current_agent_id: str = ""
    agent_missing: bool = False
    agent_name: str = ""
    runtime_label: str = ""
    form_version: int = 0  # bumped on load: uncontrolled fields re-mount with saved values
    form_name: str = ""
    form_system_prompt: str = ""
    form_description: str = ""
    form_temperature: str = ""
    form_max_tokens: str = ""
    reasoning_effort: str = DEFAULT_EFFORT
    provider_id: str = NO_PROVIDER
    model: str = ""
    kind: str = "cattle"
    tools: dict[str, str] = {}
    providers: list[ProviderOption] = []
    blockers: list[BlockerRow] = []
    warnings: list[BlockerRow] = []
    runtime: str = ""
    capabilities: list[str] = []
    environment_id: str = DEFAULT_ENVIRONMENT
    skills: list[str] = []
    mcp_servers: list[str] = []
    model_version: int = 0  # bumped when a model is picked from the list: the model field re-mounts
    save_state: str = ""  # "" (nothing saved yet), "saving", "saved"
    # The Pet sandbox: whether there is one, the changes waiting for Apply, Apply's progress.
    has_pet_sandbox: bool = False
    pending_changes: list[str] = []
    applying: bool = False
    apply_error: str = ""
    name_error: str = ""
    provider_error: str = ""
    model_error: str = ""
    system_prompt_error: str = ""
    kind_error: str = ""
    tools_error: str = ""
    description_error: str = ""
    temperature_error: str = ""
    max_tokens_error: str = ""
    reasoning_effort_error: str = ""
    provider_options_error: str = ""
    runtime_error: str = ""
    environment_error: str = ""
    skills_error: str = ""
    mcp_servers_error: str = ""

    @rx.var
    def ready(self) -> bool:
        return not self.blockers

    @rx.var
    def status(self) -> str:
        if self.needs_approval:
            return "Needs approval"
        if self.run_active:
            return "Working"
        if self.blockers:
            return "Setup required"
        if self.last_run_status == "cancelled":
            return "Stopped"
        return "Ready"

    @rx.var
    def can_send(self) -> bool:
        return not self.blockers and not self.run_active and not self.sending and not self.agent_missing

    @rx.var
    def can_think(self) -> bool:
        return "thinking_stream" in self.capabilities

    @rx.var
    def can_ask(self) -> bool:
        return "permission_requests" in self.capabilities

    @rx.var
    def save_label(self) -> str:
        """The form header's indicator: the first field left unsaved wins over "Saved"."""
        if self.save_state == "saving":
            return "Saving…"
        errors = [
            self.name_error, self.description_error, self.provider_error, self.model_error,
            self.system_prompt_error, self.kind_error, self.tools_error, self.temperature_error,
            self.max_tokens_error, self.reasoning_effort_error, self.provider_options_error, self.runtime_error,
            self.environment_error, self.skills_error, self.mcp_servers_error,
        ]
        first = next((error for error in errors if error), "")
        if first:
            return "Not saved: " + first
        return "Saved" if self.save_state == "saved" else ""

    @rx.var
    def provider_models(self) -> list[str]:
        for option in self.providers:
            if option.id == self.provider_id:
                return list(option.models)
        return []

    # --- loading ---

    async def _context(self) -> tuple[str, str, SessionState]:
        session = await self.get_state(SessionState)
        return await current_account_id(self), session.current_app_id, session

    def _apply_form(self, form: _AgentForm) -> None:
        self.agent_name = form.name
        self.runtime_label = form.runtime_label
        self.form_name = form.name
        self.form_system_prompt = form.system_prompt
        self.form_description = form.description
        self.form_temperature = form.temperature
        self.form_max_tokens = form.max_tokens
        self.reasoning_effort = form.reasoning_effort
        self.provider_id = form.provider_id
        self.model = form.model
        self.kind = form.kind
        self.tools = form.tools
        self.providers = form.providers
        self.blockers = form.blockers
        self.warnings = form.warnings
        self.runtime = form.runtime
        self.capabilities = form.capabilities
        self.environment_id = form.environment_id
        self.skills = form.skills
        self.mcp_servers = form.mcp_servers
        self.save_state = ""
        self.apply_error = ""
        self.form_version += 1
        for error_var in FORM_ERROR_FIELDS.values():
            setattr(self, error_var, "")

    @rx.event
    async def load(self) -> Any:
        """After the App guard: the agent's form, then the thread named in the URL (if any)."""
        self._reset_chat()
        self.thread_id = ""
        match = _AGENT_PATH.search(self.router.url.path or "")
        agent_id = match.group(2) if match else ""
        self.current_agent_id = agent_id
        self._chat_agent_id = agent_id
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            return None  # not found, or the guard has just sent the tab to /login
        account_id, app_id, session = await self._context()
        try:
            form = await asyncio.to_thread(_load_agent, account_id, app_id, agent_id)
        except NotFound:
            self.agent_missing = True
            return None
        self.agent_missing = False
        self._apply_form(form)
        await self._refresh_pet(account_id, app_id, agent_id)
        versions = await self.get_state(VersionsState)
        await versions.refresh(account_id, app_id, agent_id)
        thread_id = str(self.router.url.query_parameters.get("thread", "") or "")
        if thread_id:
            if await asyncio.to_thread(_thread_of_agent, account_id, agent_id, thread_id):
                self.thread_id = thread_id
                return PreviewState.watch
            self.thread_missing = True
            return thread_url_script("")
        return None

    # --- the form: every field saves on its own (autosave) ---

    async def _refresh_pet(self, account_id: str, app_id: str, agent_id: str) -> None:
        pending = await asyncio.to_thread(_pet_status, account_id, app_id, agent_id)
        self.has_pet_sandbox = pending is not None
        self.pending_changes = pending or []

    async def _persist(self, field_name: str, work: Any, *args: Any) -> bool:
        """Run one save (`_save_fields` / `_save_option`) for the field the owner changed;
        a refusal shows next to that field and the stored value stays as it was. The session
        check comes before the save: what a handler showed before calling this (the value
        picked, "Saving…") is the tab's own display, and a signed-out tab leaves for /login."""
        account_id, app_id, _session = await self._context()
        error_var = FORM_ERROR_FIELDS.get(field_name, "name_error")
        try:
            saved: _Saved = await asyncio.to_thread(work, account_id, app_id, self.current_agent_id, *args)
        except InvalidInput as error:
            setattr(self, error_var, error.message)
            self.save_state = "saved" if self.save_state == "saving" else self.save_state
            return False
        except NotFound:
            self.agent_missing = True
            return False
        except MosooError as error:
            setattr(self, error_var, error.message)
            self.save_state = "saved" if self.save_state == "saving" else self.save_state
            return False
        setattr(self, error_var, "")
        if field_name == "provider_credential_id":
            self.model_error = ""  # the provider pick may also have filled in the model
        self.blockers = saved.blockers
        self.warnings = saved.warnings
        self.agent_name = saved.agent.name
        self.save_state = "saved"
        if field_name in ("kind", "environment_id", "skills"):
            await self._refresh_pet(account_id, app_id, self.current_agent_id)
        return True

    async def _save_text(self, field_name: str, value: str) -> Any:
        self.save_state = "saving"
        yield
        await self._persist(field_name, _save_fields, {field_name: value})

    @rx.event
    async def save_name(self, value: str) -> Any:
        async for update in self._save_text("name", value):
            yield update

    @rx.event
    async def save_description(self, value: str) -> Any:
        async for update in self._save_text("description", value):
            yield update

    @rx.event
    async def save_system_prompt(self, value: str) -> Any:
        async for update in self._save_text("system_prompt", value):
            yield update

    @rx.event
    async def save_model(self, value: str) -> Any:
        self.save_state = "saving"
        yield
        if await self._persist("model", _save_fields, {"model": value}):
            self.model = value.strip()

    @rx.event
    async def set_model(self, value: str) -> Any:
        """A model picked from the provider's list: saved at once, the field shows it."""
        previous = self.model
        self.model = value
        self.model_version += 1
        self.save_state = "saving"
        yield
        if not await self._persist("model", _save_fields, {"model": value}):
            self.model = previous

    async def _save_option_text(self, key: str, raw: str) -> Any:
        value, error = _parse_option(key, raw)
        error_var = FORM_ERROR_FIELDS[key]
        if error:
            setattr(self, error_var, error)  # not saved: the stored option stays
            return
        self.save_state = "saving"
        yield
        if await self._persist(key, _save_option, key, value):
            setattr(self, "form_" + key, (raw or "").strip())

    @rx.event
    async def save_temperature(self, value: str) -> Any:
        async for update in self._save_option_text("temperature", value):
            yield update

    @rx.event
    async def save_max_tokens(self, value: str) -> Any:
        async for update in self._save_option_text("max_tokens", value):
            yield update

    @rx.event
    async def set_reasoning_effort(self, value: str) -> Any:
        if value != DEFAULT_EFFORT and value not in agents.REASONING_EFFORTS:
            return
        previous = self.reasoning_effort
        self.reasoning_effort = value
        self.save_state = "saving"
        yield
        option = None if value == DEFAULT_EFFORT else value
        if not await self._persist("reasoning_effort", _save_option, "reasoning_effort", option):
            self.reasoning_effort = previous

    @rx.event
    async def choose_provider(self, value: str) -> Any:
        previous_provider, previous_model = self.provider_id, self.model
        self.provider_id = value
        changes: dict[str, Any] = {"provider_credential_id": None if value == NO_PROVIDER else value}
        models = self.provider_models
        if models and not self.model:
            self.model = models[0]
            self.model_version += 1
            changes["model"] = self.model
        self.save_state = "saving"
        yield
        if not await self._persist("provider_credential_id", _save_fields, changes):
            self.provider_id, self.model = previous_provider, previous_model
            self.model_version += 1

    async def _save_choice(self, field_name: str, value: Any, previous: Any) -> Any:
        """A select or switch: shown at once, saved at once, put back if refused."""
        setattr(self, field_name, value)
        self.save_state = "saving"
        yield
        stored = None if field_name == "environment_id" and value == DEFAULT_ENVIRONMENT else value
        if not await self._persist(field_name, _save_fields, {field_name: stored}):
            setattr(self, field_name, previous)

    @rx.event
    async def set_kind(self, value: str | list[str]) -> Any:
        if isinstance(value, str) and value in ("pet", "cattle") and value != self.kind:
            async for update in self._save_choice("kind", value, self.kind):
                yield update

    @rx.event
    async def set_runtime(self, value: str) -> Any:
        runtime = agents.RUNTIMES.get(value)
        if runtime is None or value == self.runtime:
            return
        async for update in self._save_choice("runtime", value, self.runtime):
            yield update
        if self.runtime == value:
            self.runtime_label = runtime.label
            self.capabilities = sorted(runtime.capabilities)

    @rx.event
    async def set_tool_policy(self, tool: str, value: str | list[str]) -> Any:
        if tool not in TOOL_DESCRIPTIONS or not isinstance(value, str) or value not in TOOL_POLICIES:
            return
        previous = dict(self.tools)
        self.tools = {**self.tools, tool: value}
        self.save_state = "saving"
        yield
        enabled = {name: policy for name, policy in self.tools.items() if policy != "off"}
        if not await self._persist("tools", _save_fields, {"tools": enabled}):
            self.tools = previous

    @rx.event
    async def choose_environment(self, value: str) -> Any:
        if value != self.environment_id:
            async for update in self._save_choice("environment_id", value, self.environment_id):
                yield update

    @rx.event
    async def remove_skill(self, skill_id: str) -> Any:
        async for update in self._save_choice("skills", [s for s in self.skills if s != skill_id], self.skills):
            yield update

    @rx.event
    async def remove_mcp_server(self, server_id: str) -> Any:
        remaining = [s for s in self.mcp_servers if s != server_id]
        async for update in self._save_choice("mcp_servers", remaining, self.mcp_servers):
            yield update

    @rx.event
    def focus_field(self, target: str) -> Any:
        """Scroll to the field a blocker names and put the cursor in it."""
        if target not in FIELD_TARGETS.values():
            return None
        return rx.call_script(
            f"(() => {{ const el = document.getElementById({target!r}); if (!el) return;"
            " el.scrollIntoView({behavior: 'smooth', block: 'center'});"
            " const control = el.querySelector('input, textarea, button, [role=combobox]');"
            " if (control) control.focus({preventScroll: true}); })()"
        )

    @rx.event(background=True)
    async def apply_pending(self) -> Any:
        """Recreate the Pet sandbox so the pending changes take effect (runtime.pets)."""
        async with self:
            account_id, app_id, _session = await self._context()
            if self.applying:
                return None
            self.applying = True
            self.apply_error = ""
            agent_id = self.current_agent_id
        try:
            await asyncio.to_thread(pets.apply_pet_changes, account_id, app_id, agent_id)
        except MosooError as error:
            async with self:
                self.applying = False
                self.apply_error = error.message
            return None
        pending = await asyncio.to_thread(_pet_status, account_id, app_id, agent_id)
        async with self:
            self.applying = False
            self.has_pet_sandbox = pending is not None
            self.pending_changes = pending or []
        return rx.toast.success("Applied. The next message starts a fresh sandbox with your workspace restored.")

    # --- the chat ---

    @rx.event
    def new_chat(self) -> Any:
        self._reset_chat()
        self.thread_id = ""
        return thread_url_script("")

    @rx.event(background=True)
    async def send(self, form: dict[str, Any]) -> Any:
        text = str(form.get("message", ""))
        async with self:
            account_id, _app_id, _session = await self._context()
            if not self.can_send:
                return None
            self.sending = True
            self.composer_error = ""
            agent_id, thread_id = self.current_agent_id, self.thread_id
            file_ids = self._take_attachment_ids()
        try:
            sent_thread = await asyncio.to_thread(
                _send_message, account_id, agent_id, thread_id, text, file_ids
            )
        except MosooError as error:
            async with self:
                self.sending = False
                self.composer_error = error.message
            return None
        new_thread = False
        async with self:
            self.sending = False
            self.composer_version += 1
            self.attachments = []
            self.attach_error = ""
            if self.thread_id != sent_thread:
                new_thread = True
                self._reset_chat()
                self.thread_id = sent_thread
            self.run_active = True  # until the watcher has the events
        if new_thread:
            return [thread_url_script(sent_thread), PreviewState.watch]
        return None

# --- the page -------------------------------------------------------------------------------

STATUS_COLORS = {
    "Setup required": "amber",
    "Ready": "green",
    "Working": "blue",
    "Needs approval": "orange",
    "Stopped": "gray",
}


def _error(message: rx.Var, test_id: str) -> rx.Component:
    return rx.cond(message != "", rx.text(message, color_scheme="red", size="1", data_testid=test_id), rx.fragment())


def _field(
    label: str, control: rx.Component, error: rx.Var | None = None, test_id: str = "",
    hint: rx.Component | None = None, field_id: str = "",
) -> rx.Component:
    return rx.vstack(
        rx.text(label, size="2", weight="medium", as_="label"),
        control,
        hint or rx.fragment(),
        _error(error, f"{test_id}-error") if error is not None else rx.fragment(),
        spacing="1",
        width="100%",
        # The target of a readiness blocker's "Fix" button.
        id=field_id or None,
        scroll_margin_top="16px",
    )


def status_pill() -> rx.Component:
    return rx.match(
        PreviewState.status,
        *[
            (
                label,
                rx.badge(
                    rx.cond(
                        PreviewState.status == "Working",
                        rx.spinner(size="1"),
                        rx.box(width="7px", height="7px", border_radius="999px", background=rx.color(color, 9)),
                    ),
                    label,
                    color_scheme=color,  # type: ignore[arg-type]
                    variant="soft",
                    radius="full",
                    size="2",
                    data_testid="preview-status",
                ),
            )
            for label, color in STATUS_COLORS.items()
        ],
        rx.fragment(),
    )


def _readiness_row(row: BlockerRow, test_id: str) -> rx.Component:
    return rx.hstack(
        rx.text(row.label, size="2", weight="medium", min_width="96px", flex_shrink="0"),
        rx.text(row.message, size="2", flex="1", min_width="0", overflow_wrap="anywhere"),
        rx.cond(
            row.target != "",
            rx.button(
                "Fix", size="1", variant="soft", type="button",
                on_click=PreviewState.focus_field(row.target),
                data_testid="readiness-fix",
            ),
            rx.fragment(),
        ),
        spacing="2",
        align="center",
        width="100%",
        data_testid=test_id,
        data_code=row.code,
    )


def _readiness_callout(
    rows: rx.Var[list[BlockerRow]], title: str, icon: str, color: str, row_test_id: str, test_id: str
) -> rx.Component:
    return rx.cond(
        rows.length() > 0,
        rx.callout.root(
            rx.callout.icon(rx.icon(icon, size=16)),
            rx.vstack(
                rx.text(title, size="2", weight="bold"),
                rx.foreach(rows, lambda row: _readiness_row(row, row_test_id)),
                spacing="1",
                width="100%",
            ),
            color_scheme=color,
            variant="surface",
            width="100%",
            data_testid=test_id,
        ),
        rx.fragment(),
    )


def _blockers() -> rx.Component:
    """What stops the agent (blockers), then what a run goes without (warnings)."""
    return rx.fragment(
        _readiness_callout(
            PreviewState.blockers, "Before this agent can run", "circle-alert", "amber", "readiness-blocker",
            "readiness-blockers",
        ),
        _readiness_callout(
            PreviewState.warnings, "Runs go without", "info", "gray", "readiness-warning", "readiness-warnings",
        ),
    )


def _pending() -> rx.Component:
    """Changes the running Pet sandbox does not have yet, and Apply."""
    return rx.cond(
        PreviewState.has_pet_sandbox & (PreviewState.pending_changes.length() > 0),
        rx.callout.root(
            rx.callout.icon(rx.icon("refresh-cw", size=16)),
            rx.vstack(
                rx.text(
                    "Pending: ", rx.text(PreviewState.pending_changes.join(", "), as_="span", weight="bold"),
                    size="2", data_testid="pending-fields",
                ),
                rx.text(
                    "The Assistant's sandbox was built before these changes. Apply saves /workspace, "
                    "then the next message starts a fresh sandbox with it.",
                    size="1",
                ),
                _error(PreviewState.apply_error, "apply-error"),
                rx.button(
                    rx.icon("refresh-cw", size=13), "Apply",
                    size="1", type="button",
                    loading=PreviewState.applying,
                    disabled=PreviewState.run_active,
                    on_click=PreviewState.apply_pending,
                    data_testid="agent-apply",
                ),
                spacing="1",
                align="start",
            ),
            color_scheme="blue",
            variant="surface",
            width="100%",
            data_testid="pending-changes",
        ),
        rx.fragment(),
    )


def _save_indicator() -> rx.Component:
    return rx.match(
        PreviewState.save_label,
        ("", rx.fragment()),
        (
            "Saving…",
            rx.text("Saving…", size="1", color_scheme="gray", data_testid="save-indicator"),
        ),
        (
            "Saved",
            rx.hstack(
                rx.icon("check", size=12), rx.text("Saved", size="1"),
                color=rx.color("green", 11), align="center", spacing="1", data_testid="save-indicator",
            ),
        ),
        rx.text(PreviewState.save_label, size="1", color_scheme="red", text_align="right", data_testid="save-indicator"),
    )


def _form_header() -> rx.Component:
    return rx.vstack(
        rx.hstack(
            rx.text("Configuration", size="3", weight="bold", flex_shrink="0"),
            rx.spacer(),
            _save_indicator(),
            align="center",
            spacing="3",
            width="100%",
        ),
        rx.text(
            "Changes save as you go. Model, prompt, tools and options apply to the next message: "
            "every run starts a fresh driver with the current settings.",
            size="1",
            color_scheme="gray",
        ),
        spacing="1",
        width="100%",
        # The indicator stays in sight while the long form scrolls.
        position="sticky",
        top="-16px",
        margin_top="-16px",
        padding_y="12px",
        background=rx.color("gray", 1),
        border_bottom=f"1px solid {rx.color('gray', 4)}",
        z_index="1",
    )


def _runtime_select() -> rx.Component:
    return rx.select.root(
        rx.select.trigger(width="100%", data_testid="agent-runtime"),
        rx.select.content(
            *[
                rx.select.item(
                    runtime.label if runtime.implemented else runtime.label + " (coming later)",
                    value=name,
                    disabled=not runtime.implemented,
                )
                for name, runtime in agents.RUNTIMES.items()
            ],
        ),
        value=PreviewState.runtime,
        on_change=PreviewState.set_runtime,
    )


def _provider_select() -> rx.Component:
    return rx.vstack(
        rx.select.root(
            rx.select.trigger(placeholder="Choose a provider key", width="100%", data_testid="agent-provider"),
            rx.select.content(
                rx.select.item("No provider key", value=NO_PROVIDER),
                rx.foreach(
                    PreviewState.providers,
                    lambda option: rx.select.item(
                        rx.cond(option.is_default, option.name + " (default)", option.name), value=option.id
                    ),
                ),
            ),
            value=PreviewState.provider_id,
            on_change=PreviewState.choose_provider,
        ),
        rx.cond(
            PreviewState.providers.length() == 0,
            rx.text(
                "No provider keys in this App yet. ",
                rx.link("Add one", href="/apps/" + SessionState.current_app_id + "/providers"),
                size="1",
                color_scheme="gray",
            ),
            rx.fragment(),
        ),
        spacing="1",
        width="100%",
    )


def _model_field() -> rx.Component:
    return rx.vstack(
        rx.input(
            default_value=PreviewState.model,
            # Re-mounted with the new value when a model is picked from the list below.
            key=PreviewState.model_version,
            on_change=PreviewState.save_model.debounce(SAVE_DEBOUNCE_MS),
            on_blur=PreviewState.save_model,
            placeholder="e.g. gpt-4o-mini",
            max_length=200,
            width="100%",
            font_family="monospace",
            data_testid="agent-model",
        ),
        rx.cond(
            PreviewState.provider_models.length() > 0,
            rx.flex(
                rx.foreach(
                    PreviewState.provider_models,
                    lambda name: rx.badge(
                        name,
                        variant=rx.cond(PreviewState.model == name, "solid", "soft"),
                        color_scheme=rx.cond(PreviewState.model == name, "iris", "gray"),
                        cursor="pointer",
                        on_click=PreviewState.set_model(name),
                        data_testid="agent-model-choice",
                    ),
                ),
                wrap="wrap",
                gap="6px",
            ),
            rx.fragment(),
        ),
        spacing="2",
        width="100%",
    )


def _policy_control(tool: str, with_ask: bool) -> rx.Component:
    items = [rx.segmented_control.item("Off", value="off"), rx.segmented_control.item("Allow", value="allow")]
    if with_ask:
        items.append(rx.segmented_control.item("Ask", value="ask"))
    return rx.segmented_control.root(
        *items,
        value=PreviewState.tools[tool].to(str),
        on_change=lambda value: PreviewState.set_tool_policy(tool, value),
        size="1",
        data_testid=f"tool-{tool}",
    )


def _tool_row(tool: str) -> rx.Component:
    return rx.hstack(
        rx.vstack(
            rx.text(tool, size="2", weight="bold", font_family="monospace"),
            rx.text(TOOL_DESCRIPTIONS[tool], size="1", color_scheme="gray"),
            spacing="0",
        ),
        rx.spacer(),
        # "Ask" needs a runtime that can pause for a permission request.
        rx.cond(PreviewState.can_ask, _policy_control(tool, True), _policy_control(tool, False)),
        align="center",
        width="100%",
        padding_y="4px",
    )


def _option_input(key: str, label: str, placeholder: str, mode: str, test_id: str, error: rx.Var) -> rx.Component:
    handler = PreviewState.save_temperature if key == "temperature" else PreviewState.save_max_tokens
    return _field(
        label,
        rx.input(
            name=key,
            default_value=PreviewState.form_temperature if key == "temperature" else PreviewState.form_max_tokens,
            placeholder=placeholder,
            input_mode=mode,
            on_change=handler.debounce(SAVE_DEBOUNCE_MS),
            on_blur=handler,
            width="100%",
            data_testid=test_id,
        ),
        error,
        test_id,
    )


def _provider_options() -> rx.Component:
    return _field(
        "Provider options",
        rx.vstack(
            rx.hstack(
                _option_input(
                    "temperature", "Temperature", "0 to 2", "decimal", "agent-temperature",
                    PreviewState.temperature_error,
                ),
                _option_input(
                    "max_tokens", "Max tokens", "1 to 200000", "numeric", "agent-max-tokens",
                    PreviewState.max_tokens_error,
                ),
                spacing="3",
                width="100%",
                align="start",
            ),
            # Only where the runtime streams the model's thinking.
            rx.cond(
                PreviewState.can_think,
                _field(
                    "Reasoning effort",
                    rx.select.root(
                        rx.select.trigger(width="100%", data_testid="agent-reasoning-effort"),
                        rx.select.content(
                            rx.select.item("Provider default", value=DEFAULT_EFFORT),
                            *[rx.select.item(effort.capitalize(), value=effort) for effort in agents.REASONING_EFFORTS],
                        ),
                        value=PreviewState.reasoning_effort,
                        on_change=PreviewState.set_reasoning_effort,
                    ),
                    PreviewState.reasoning_effort_error,
                    "agent-reasoning-effort",
                ),
                rx.fragment(),
            ),
            spacing="2",
            width="100%",
        ),
        PreviewState.provider_options_error,
        "agent-provider-options",
        rx.text("Optional. Leave empty to use the provider's default.", size="1", color_scheme="gray"),
        field_id=FIELD_TARGETS["provider_options"],
    )


def _environment_select() -> rx.Component:
    return rx.vstack(
        rx.select.root(
            rx.select.trigger(width="100%", data_testid="agent-environment"),
            rx.select.content(
                rx.select.item("Default environment", value=DEFAULT_ENVIRONMENT),
                # A bound environment that does not exist (readiness blocks it) stays visible
                # so the owner sees what is bound and can switch back to the default.
                rx.cond(
                    PreviewState.environment_id != DEFAULT_ENVIRONMENT,
                    rx.select.item("Missing: " + PreviewState.environment_id, value=PreviewState.environment_id),
                    rx.fragment(),
                ),
            ),
            value=PreviewState.environment_id,
            on_change=PreviewState.choose_environment,
        ),
        rx.text(
            "No environments yet — the default environment is used.", size="1", color_scheme="gray",
            data_testid="agent-environment-empty",
        ),
        spacing="1",
        width="100%",
    )


def _bound_list(items: rx.Var, remove: Any, empty: str, test_id: str) -> rx.Component:
    return rx.vstack(
        rx.foreach(
            items,
            lambda item_id: rx.hstack(
                rx.badge("Missing", color_scheme="amber", variant="soft"),
                rx.text(item_id, size="1", font_family="monospace", flex="1"),
                rx.icon_button(
                    rx.icon("x", size=12), size="1", variant="ghost", color_scheme="gray", type="button",
                    on_click=remove(item_id), aria_label="Remove",
                    data_testid=f"{test_id}-remove",
                ),
                align="center",
                width="100%",
                data_testid=f"{test_id}-bound",
            ),
        ),
        rx.text(empty, size="1", color_scheme="gray", data_testid=f"{test_id}-empty"),
        spacing="1",
        width="100%",
    )


def _bindings() -> rx.Component:
    return rx.fragment(
        _field(
            "Environment", _environment_select(), PreviewState.environment_error, "agent-environment",
            field_id=FIELD_TARGETS["environment_id"],
        ),
        _field(
            "Skills",
            _bound_list(
                PreviewState.skills, PreviewState.remove_skill,
                "No skills in this App yet — skills arrive in a later release.", "agent-skills",
            ),
            PreviewState.skills_error, "agent-skills", field_id=FIELD_TARGETS["skills"],
        ),
        _field(
            "MCP servers",
            _bound_list(
                PreviewState.mcp_servers, PreviewState.remove_mcp_server,
                "No MCP servers in this App yet — they arrive in a later release.", "agent-mcp-servers",
            ),
            PreviewState.mcp_servers_error, "agent-mcp-servers", field_id=FIELD_TARGETS["mcp_servers"],
        ),
    )


def _text_input(value: rx.Var, handler: Any, test_id: str, **props: Any) -> rx.Component:
    return rx.input(
        default_value=value,
        on_change=handler.debounce(SAVE_DEBOUNCE_MS),
        on_blur=handler,
        width="100%",
        data_testid=test_id,
        **props,
    )


def _text_area(value: rx.Var, handler: Any, test_id: str, **props: Any) -> rx.Component:
    return rx.text_area(
        default_value=value,
        on_change=handler.debounce(SAVE_DEBOUNCE_MS),
        on_blur=handler,
        resize="vertical",
        width="100%",
        data_testid=test_id,
        **props,
    )


def _agent_form() -> rx.Component:
    return rx.box(
        rx.vstack(
            _form_header(),
            _blockers(),
            _pending(),
            _field(
                "Name",
                _text_input(PreviewState.form_name, PreviewState.save_name, "agent-name-input", max_length=80),
                PreviewState.name_error,
                "agent-name",
                field_id=FIELD_TARGETS["name"],
            ),
            _field(
                "Description",
                _text_area(
                    PreviewState.form_description, PreviewState.save_description, "agent-description",
                    placeholder="What this agent is for (optional)", max_length=500, rows="2",
                ),
                PreviewState.description_error,
                "agent-description",
                field_id=FIELD_TARGETS["description"],
            ),
            _field("Runtime", _runtime_select(), PreviewState.runtime_error, "agent-runtime", field_id=FIELD_TARGETS["runtime"]),
            _field(
                "Provider key", _provider_select(), PreviewState.provider_error, "agent-provider",
                field_id=FIELD_TARGETS["provider_credential_id"],
            ),
            _field("Model", _model_field(), PreviewState.model_error, "agent-model", field_id=FIELD_TARGETS["model"]),
            _field(
                "System prompt",
                _text_area(
                    PreviewState.form_system_prompt, PreviewState.save_system_prompt, "agent-system-prompt",
                    placeholder="You are a careful assistant for …", rows="12", min_height="220px",
                ),
                PreviewState.system_prompt_error,
                "agent-system-prompt",
                field_id=FIELD_TARGETS["system_prompt"],
            ),
            _field(
                "Kind",
                rx.segmented_control.root(
                    rx.segmented_control.item("Assistant", value="pet"),
                    rx.segmented_control.item("Task", value="cattle"),
                    value=PreviewState.kind,
                    on_change=PreviewState.set_kind,
                    width="100%",
                    data_testid="agent-kind",
                ),
                PreviewState.kind_error,
                "agent-kind",
                rx.text(
                    rx.cond(
                        PreviewState.kind == "pet",
                        "One long-lived sandbox shared by all its threads.",
                        "A fresh sandbox for every run.",
                    ),
                    size="1",
                    color_scheme="gray",
                ),
                field_id=FIELD_TARGETS["kind"],
            ),
            _field(
                "Tools",
                rx.vstack(*[_tool_row(tool) for tool in TOOL_DESCRIPTIONS], spacing="1", width="100%"),
                PreviewState.tools_error,
                "agent-tools",
                rx.cond(
                    PreviewState.can_ask,
                    rx.text("Ask: the agent waits for your approval in the chat.", size="1", color_scheme="gray"),
                    rx.fragment(),
                ),
                field_id=FIELD_TARGETS["tools"],
            ),
            _provider_options(),
            _bindings(),
            spacing="4",
            width="100%",
        ),
        # Re-mount the uncontrolled fields with the saved values after each load.
        key=PreviewState.form_version,
        width="100%",
    )


def _empty_chat() -> rx.Component:
    return rx.center(
        rx.cond(
            PreviewState.ready,
            rx.vstack(
                rx.box(
                    rx.icon("message-circle", size=26, color=rx.color("accent", 11)),
                    background=rx.color("accent", 3),
                    border_radius="999px",
                    padding="12px",
                    display="flex",
                ),
                rx.text("Try " + PreviewState.agent_name, size="4", weight="bold"),
                rx.text(
                    "Send a message to test your changes. Tool calls, approvals and usage show up here as they happen.",
                    size="2",
                    color_scheme="gray",
                    text_align="center",
                    max_width="360px",
                ),
                align="center",
                spacing="2",
            ),
            rx.vstack(
                rx.box(
                    rx.icon("settings-2", size=26, color=rx.color("amber", 11)),
                    background=rx.color("amber", 3),
                    border_radius="999px",
                    padding="12px",
                    display="flex",
                ),
                rx.text("Finish the setup to start chatting", size="4", weight="bold"),
                rx.vstack(
                    rx.foreach(
                        PreviewState.blockers,
                        lambda blocker: rx.text(
                            rx.text(blocker.label, weight="bold", as_="span"), " · ", blocker.message,
                            size="2", color_scheme="gray",
                        ),
                    ),
                    align="center",
                    spacing="1",
                ),
                align="center",
                spacing="2",
            ),
        ),
        height="100%",
        min_height="320px",
        data_testid="chat-empty",
    )


def _composer() -> rx.Component:
    return chat_composer(
        PreviewState,
        upload_id="preview-attachments",
        placeholder=rx.cond(
            PreviewState.ready,
            "Message " + PreviewState.agent_name + "…  (Enter to send, Shift+Enter for a new line)",
            "Finish the setup on the left to send messages.",
        ),
        can_send=PreviewState.can_send,
        enabled=PreviewState.ready,
        on_submit=PreviewState.send,
        footer_note=rx.cond(
            PreviewState.usage_total != "",
            rx.text("This chat: ", PreviewState.usage_total, size="1", color_scheme="gray"),
            rx.fragment(),
        ),
    )


def _chat_panel() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.text("Preview", size="3", weight="bold"),
                status_pill(),
                rx.spacer(),
                rx.button(
                    rx.icon("message-square-plus", size=14), "New chat",
                    size="1", variant="soft", color_scheme="gray",
                    on_click=PreviewState.new_chat,
                    data_testid="chat-new",
                ),
                align="center",
                width="100%",
                padding="12px 16px",
                border_bottom=f"1px solid {rx.color('gray', 4)}",
            ),
            rx.cond(
                PreviewState.thread_missing,
                rx.callout("That thread was not found; this is a new chat.", icon="info", size="1", margin="12px 16px 0 16px"),
                rx.fragment(),
            ),
            rx.auto_scroll(
                rx.cond(
                    (PreviewState.items.length() > 0) | (PreviewState.live_kind != ""),
                    transcript_view(
                        PreviewState.items,
                        PreviewState.live_kind,
                        PreviewState.live_text,
                        PreviewState.run_active & ~PreviewState.needs_approval,
                        PreviewState.answered_requests,
                        PreviewState.allow_once,
                        PreviewState.reject,
                    ),
                    _empty_chat(),
                ),
                flex="1",
                min_height="0",
                width="100%",
                padding="20px",
            ),
            _composer(),
            spacing="0",
            height="100%",
            width="100%",
        ),
        padding="0",
        height="calc(100vh - 140px)",
        min_height="520px",
        flex="1",
        min_width="0",
        data_testid="chat-panel",
    )


def _header() -> rx.Component:
    return rx.hstack(
        rx.link(
            rx.hstack(rx.icon("arrow-left", size=14), rx.text("Agents", size="2"), align="center", spacing="1"),
            href="/apps/" + SessionState.current_app_id + "/agents",
            color_scheme="gray",
            underline="none",
        ),
        rx.text("/", color_scheme="gray", size="2"),
        rx.heading(PreviewState.agent_name, size="5", weight="bold", data_testid="page-title"),
        rx.badge(PreviewState.runtime_label, variant="soft", color_scheme="gray"),
        publish_controls(blocked=~PreviewState.ready),
        align="center",
        spacing="2",
        width="100%",
        margin_bottom="16px",
    )


def _content() -> rx.Component:
    return rx.cond(
        SessionState.app_missing,
        not_found_card(),
        rx.cond(
            PreviewState.agent_missing,
            missing_card(
                "Agent not found", "Back to Agents", "/apps/" + SessionState.current_app_id + "/agents",
                "agent-not-found",
            ),
            rx.vstack(
                _header(),
                rx.flex(
                    rx.box(
                        _agent_form(),
                        width=["100%", "100%", "400px"],
                        min_width=["0", "0", "360px"],
                        flex_shrink="0",
                        height=["auto", "auto", "calc(100vh - 140px)"],
                        min_height=["0", "0", "520px"],
                        overflow_y="auto",
                        padding="16px",
                        border=f"1px solid {rx.color('gray', 5)}",
                        border_radius="12px",
                        background=rx.color("gray", 1),
                        data_testid="agent-form",
                    ),
                    _chat_panel(),
                    direction=rx.breakpoints(initial="column", md="row"),
                    gap="16px",
                    width="100%",
                    align="start",
                ),
                width="100%",
                spacing="0",
            ),
        ),
    )


def preview_page() -> rx.Component:
    return console_shell(_content, max_width="1440px")
