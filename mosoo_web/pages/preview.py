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

from mosoo_core import agents, sessions, streams, tasks_client, vault
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, InvalidInput, MosooError, NotFound
from mosoo_core.logs import get_logger
from mosoo_web.components.chat import transcript_view
from mosoo_web.components.layout import console_shell
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
}
DEFAULT_EFFORT = "default"  # the select's value for "no reasoning_effort key"
# Which provider option a service error is about, by how its message starts.
OPTION_ERROR_PREFIXES = {"Temperature": "temperature", "Max tokens": "max_tokens", "Reasoning effort": "reasoning_effort"}
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


# --- services, as the console calls them (run in a worker thread) ------------------------------


def _blocker_rows(readiness: agents.Readiness) -> list[BlockerRow]:
    return [BlockerRow(code=b.code, label=FIELD_LABELS.get(b.field, b.field), message=b.message) for b in readiness.blockers]


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
    )


def _save_agent(
    account_id: str, app_id: str, agent_id: str, changes: dict[str, Any], option_updates: dict[str, Any]
) -> list[BlockerRow]:
    """Save the form; `option_updates` change (None: remove) those provider options, the
    agent's other provider options stay."""
    with session_scope() as db:
        current = agents.get_agent(db, account_id, app_id, agent_id).provider_options
        options = {**current, **option_updates}
        agent = agents.update_agent(db, account_id, app_id, agent_id, **changes, provider_options=options)
        return _blocker_rows(agents.readiness(db, agent))


def _option_updates(form: dict[str, Any], effort: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The provider options the form sets (None: empty, remove the key) and the fields that
    do not parse. Ranges are checked by `update_agent`."""
    updates: dict[str, Any] = {}
    errors: dict[str, str] = {}
    temperature = str(form.get("temperature", "") or "").strip()
    try:
        updates["temperature"] = float(temperature) if temperature else None
    except ValueError:
        errors["temperature"] = "Temperature is a number from 0 to 2."
    max_tokens = str(form.get("max_tokens", "") or "").strip()
    try:
        updates["max_tokens"] = int(max_tokens) if max_tokens else None
    except ValueError:
        errors["max_tokens"] = f"Max tokens is a whole number from 1 to {agents.MAX_TOKENS_LIMIT:,}."
    updates["reasoning_effort"] = None if effort == DEFAULT_EFFORT else effort
    return updates, errors


def _thread_of_agent(account_id: str, agent_id: str, thread_id: str) -> bool:
    with session_scope() as db:
        try:
            return sessions.get_session(db, account_id, thread_id).agent_id == agent_id
        except NotFound:
            return False


def _send_message(account_id: str, app_id: str, agent_id: str, thread_id: str, text: str) -> str:
    """Store the message (starting a thread when there is none), then hand the run to the
    worker. Returns the thread id."""
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        readiness = agents.readiness(db, agent)
        if not readiness.ready:
            raise Conflict("Finish the setup first: " + " ".join(b.message for b in readiness.blockers))
        if not thread_id:
            thread_id = sessions.create_session(db, account_id, app_id, agent_id, purpose="preview").id
        sent = sessions.send_message(db, account_id, thread_id, text)
    streams.publish_events(sent.events)
    try:
        tasks_client.enqueue_run_dispatch(sent.run.id)
    except Exception:
        # Nothing will pick the run up: close it so the thread takes a message again.
        with session_scope() as db:
            cancelled = sessions.cancel_active_run(db, account_id, thread_id)
        streams.publish_events(cancelled)
        raise Conflict("The message is saved, but the worker could not be reached to run it. Try again.") from None
    return thread_id


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
    saving: bool = False
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
        self.form_version += 1
        for error_var in FORM_ERROR_FIELDS.values():
            setattr(self, error_var, "")

    @rx.event
    async def load(self) -> Any:
        """After the App guard: the agent's form, then the thread named in the URL (if any)."""
        self._reset_chat()
        self.thread_id = ""
        account_id, app_id, session = await self._context()
        match = _AGENT_PATH.search(self.router.url.path or "")
        agent_id = match.group(2) if match else ""
        self.current_agent_id = agent_id
        if session.app_missing or not app_id:
            return None
        try:
            form = await asyncio.to_thread(_load_agent, account_id, app_id, agent_id)
        except NotFound:
            self.agent_missing = True
            return None
        self.agent_missing = False
        self._apply_form(form)
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

    # --- the form ---

    @rx.event
    def choose_provider(self, value: str) -> None:
        self.provider_id = value
        self.provider_error = ""
        models = self.provider_models
        if models and not self.model:
            self.model = models[0]

    @rx.event
    def set_model(self, value: str) -> None:
        self.model = value
        self.model_error = ""

    @rx.event
    def set_kind(self, value: str | list[str]) -> None:
        if isinstance(value, str) and value in ("pet", "cattle"):
            self.kind = value

    @rx.event
    def set_reasoning_effort(self, value: str) -> None:
        if value == DEFAULT_EFFORT or value in agents.REASONING_EFFORTS:
            self.reasoning_effort = value
            self.reasoning_effort_error = ""

    @rx.event
    def set_tool_policy(self, tool: str, value: str | list[str]) -> None:
        if tool in TOOL_DESCRIPTIONS and isinstance(value, str) and value in TOOL_POLICIES:
            self.tools = {**self.tools, tool: value}

    @rx.event
    async def save(self, form: dict[str, Any]) -> Any:
        for error_var in FORM_ERROR_FIELDS.values():
            setattr(self, error_var, "")
        account_id, app_id, _session = await self._context()
        option_updates, option_errors = _option_updates(form, self.reasoning_effort)
        if option_errors:
            for key, message in option_errors.items():
                setattr(self, FORM_ERROR_FIELDS[key], message)
            return rx.toast.error("Not saved: " + next(iter(option_errors.values())))
        changes = {
            "name": str(form.get("name", "")),
            "description": str(form.get("description", "")),
            "system_prompt": str(form.get("system_prompt", "")),
            "provider_credential_id": None if self.provider_id == NO_PROVIDER else self.provider_id,
            "model": self.model,
            "kind": self.kind,
            "tools": {tool: policy for tool, policy in self.tools.items() if policy != "off"},
        }
        try:
            blockers = await asyncio.to_thread(
                _save_agent, account_id, app_id, self.current_agent_id, changes, option_updates
            )
        except InvalidInput as error:
            error_field = error.field or ""
            if error_field == "provider_options":
                error_field = next(
                    (key for prefix, key in OPTION_ERROR_PREFIXES.items() if error.message.startswith(prefix)),
                    error_field,
                )
            setattr(self, FORM_ERROR_FIELDS.get(error_field, "name_error"), error.message)
            return rx.toast.error("Not saved: " + error.message)
        except NotFound:
            self.agent_missing = True
            return None
        self.blockers = blockers
        self.agent_name = " ".join(changes["name"].split())
        self.form_name = self.agent_name
        self.form_system_prompt = changes["system_prompt"]
        self.form_description = changes["description"]
        self.form_temperature = str(form.get("temperature", "") or "").strip()
        self.form_max_tokens = str(form.get("max_tokens", "") or "").strip()
        return rx.toast.success("Saved.")

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
            if not self.can_send:
                return None
            self.sending = True
            self.composer_error = ""
            account_id, app_id, _session = await self._context()
            agent_id, thread_id = self.current_agent_id, self.thread_id
        try:
            sent_thread = await asyncio.to_thread(_send_message, account_id, app_id, agent_id, thread_id, text)
        except MosooError as error:
            async with self:
                self.sending = False
                self.composer_error = error.message
            return None
        new_thread = False
        async with self:
            self.sending = False
            self.composer_version += 1
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


def _field(label: str, control: rx.Component, error: rx.Var | None = None, test_id: str = "", hint: rx.Component | None = None) -> rx.Component:
    return rx.vstack(
        rx.text(label, size="2", weight="medium", as_="label"),
        control,
        hint or rx.fragment(),
        _error(error, f"{test_id}-error") if error is not None else rx.fragment(),
        spacing="1",
        width="100%",
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


def _blockers() -> rx.Component:
    return rx.cond(
        PreviewState.blockers.length() > 0,
        rx.callout.root(
            rx.callout.icon(rx.icon("circle-alert", size=16)),
            rx.vstack(
                rx.text("Before this agent can run", size="2", weight="bold"),
                rx.foreach(
                    PreviewState.blockers,
                    lambda blocker: rx.hstack(
                        rx.text(blocker.label, size="2", weight="medium", min_width="96px"),
                        rx.text(blocker.message, size="2"),
                        spacing="2",
                        data_testid="readiness-blocker",
                        data_code=blocker.code,
                    ),
                ),
                spacing="1",
            ),
            color_scheme="amber",
            variant="surface",
            width="100%",
            data_testid="readiness-blockers",
        ),
        rx.fragment(),
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
            value=PreviewState.model,
            on_change=PreviewState.set_model,
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


def _tool_row(tool: str) -> rx.Component:
    return rx.hstack(
        rx.vstack(
            rx.text(tool, size="2", weight="bold", font_family="monospace"),
            rx.text(TOOL_DESCRIPTIONS[tool], size="1", color_scheme="gray"),
            spacing="0",
        ),
        rx.spacer(),
        rx.segmented_control.root(
            rx.segmented_control.item("Off", value="off"),
            rx.segmented_control.item("Allow", value="allow"),
            rx.segmented_control.item("Ask", value="ask"),
            value=PreviewState.tools[tool].to(str),
            on_change=lambda value: PreviewState.set_tool_policy(tool, value),
            size="1",
            data_testid=f"tool-{tool}",
        ),
        align="center",
        width="100%",
        padding_y="4px",
    )


def _provider_options() -> rx.Component:
    return _field(
        "Provider options",
        rx.vstack(
            rx.hstack(
                _field(
                    "Temperature",
                    rx.input(
                        name="temperature",
                        default_value=PreviewState.form_temperature,
                        placeholder="0 to 2",
                        input_mode="decimal",
                        width="100%",
                        data_testid="agent-temperature",
                    ),
                    PreviewState.temperature_error,
                    "agent-temperature",
                ),
                _field(
                    "Max tokens",
                    rx.input(
                        name="max_tokens",
                        default_value=PreviewState.form_max_tokens,
                        placeholder="1 to 200000",
                        input_mode="numeric",
                        width="100%",
                        data_testid="agent-max-tokens",
                    ),
                    PreviewState.max_tokens_error,
                    "agent-max-tokens",
                ),
                spacing="3",
                width="100%",
                align="start",
            ),
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
            spacing="2",
            width="100%",
        ),
        PreviewState.provider_options_error,
        "agent-provider-options",
        rx.text("Optional. Leave empty to use the provider's default.", size="1", color_scheme="gray"),
    )


def _agent_form() -> rx.Component:
    return rx.form(
        rx.vstack(
            _blockers(),
            _field(
                "Name",
                rx.input(
                    name="name",
                    default_value=PreviewState.form_name,
                    max_length=80,
                    width="100%",
                    data_testid="agent-name-input",
                ),
                PreviewState.name_error,
                "agent-name",
            ),
            _field(
                "Description",
                rx.text_area(
                    name="description",
                    default_value=PreviewState.form_description,
                    placeholder="What this agent is for (optional)",
                    max_length=500,
                    rows="2",
                    resize="vertical",
                    width="100%",
                    data_testid="agent-description",
                ),
                PreviewState.description_error,
                "agent-description",
            ),
            _field("Provider key", _provider_select(), PreviewState.provider_error, "agent-provider"),
            _field("Model", _model_field(), PreviewState.model_error, "agent-model"),
            _field(
                "System prompt",
                rx.text_area(
                    name="system_prompt",
                    default_value=PreviewState.form_system_prompt,
                    placeholder="You are a careful assistant for …",
                    rows="12",
                    min_height="220px",
                    resize="vertical",
                    width="100%",
                    data_testid="agent-system-prompt",
                ),
                PreviewState.system_prompt_error,
                "agent-system-prompt",
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
            ),
            _field(
                "Tools",
                rx.vstack(*[_tool_row(tool) for tool in TOOL_DESCRIPTIONS], spacing="1", width="100%"),
                PreviewState.tools_error,
                "agent-tools",
                rx.text("Ask: the agent waits for your approval in the chat.", size="1", color_scheme="gray"),
            ),
            _provider_options(),
            rx.box(
                rx.button(rx.icon("save", size=15), "Save", type="submit", size="3", width="100%", data_testid="agent-save"),
                # Always in reach while the long form scrolls.
                position="sticky",
                bottom="-16px",
                padding_y="12px",
                margin_bottom="-12px",
                background=rx.color("gray", 1),
                width="100%",
                z_index="1",
            ),
            spacing="4",
            width="100%",
        ),
        # Re-mount the uncontrolled fields with the saved values after each load.
        key=PreviewState.form_version,
        on_submit=PreviewState.save,
        reset_on_submit=False,
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
    return rx.vstack(
        _error(PreviewState.composer_error, "chat-error"),
        rx.form(
            rx.box(
                rx.text_area(
                    name="message",
                    placeholder=rx.cond(
                        PreviewState.ready,
                        "Message " + PreviewState.agent_name + "…  (Enter to send, Shift+Enter for a new line)",
                        "Finish the setup on the left to send messages.",
                    ),
                    enter_key_submit=True,
                    # Kept on a refused send; cleared (re-mounted) once the message is stored.
                    key=PreviewState.composer_version,
                    rows="3",
                    resize="none",
                    variant="soft",
                    width="100%",
                    disabled=~PreviewState.ready,
                    data_testid="chat-input",
                ),
                rx.hstack(
                    rx.cond(
                        PreviewState.usage_total != "",
                        rx.text("This chat: ", PreviewState.usage_total, size="1", color_scheme="gray"),
                        rx.fragment(),
                    ),
                    rx.spacer(),
                    rx.cond(
                        PreviewState.run_active,
                        rx.button(
                            rx.icon("square", size=13), "Stop",
                            type="button", size="2", variant="soft", color_scheme="red",
                            on_click=PreviewState.stop,
                            data_testid="chat-stop",
                        ),
                        rx.fragment(),
                    ),
                    rx.button(
                        rx.icon("arrow-up", size=15), "Send",
                        type="submit", size="2",
                        disabled=~PreviewState.can_send,
                        loading=PreviewState.sending,
                        data_testid="chat-send",
                    ),
                    align="center",
                    spacing="2",
                    width="100%",
                    padding_top="8px",
                ),
                width="100%",
            ),
            on_submit=PreviewState.send,
            reset_on_submit=False,
            width="100%",
        ),
        width="100%",
        spacing="2",
        padding="12px 16px 16px 16px",
        border_top=f"1px solid {rx.color('gray', 4)}",
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


def _agent_not_found() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Agent not found", size="5"),
            rx.text("It does not exist, or it is not yours.", color_scheme="gray"),
            rx.link("Back to Agents", href="/apps/" + SessionState.current_app_id + "/agents"),
            spacing="2",
        ),
        data_testid="agent-not-found",
    )


def _content() -> rx.Component:
    return rx.cond(
        SessionState.app_missing,
        not_found_card(),
        rx.cond(
            PreviewState.agent_missing,
            _agent_not_found(),
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
