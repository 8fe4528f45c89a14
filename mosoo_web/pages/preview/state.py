"""The Preview page's state: the Agent's form, where every field saves on its own
(autosave), the Pet sandbox's pending changes, and the test chat.

The chat itself (the thread's live transcript, Stop, permissions, attachments) comes from
`ThreadChat` in `mosoo_web/state/thread_chat.py`, which Preview shares with the Threads
page. The thread id sits in the URL (`?thread=`) so a reload re-opens it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import reflex as rx

from mosoo_core import agents
from mosoo_core.errors import InvalidInput, MosooError, NotFound
from mosoo_core.runtime import pets
from mosoo_core.skills import parse_binding
from mosoo_web.components.versions import VersionsState
from mosoo_web.pages.preview.fields import (
    DEFAULT_EFFORT,
    DEFAULT_ENVIRONMENT,
    ERROR_FIELDS,
    FIELD_TARGETS,
    NO_PROVIDER,
    TOOL_DESCRIPTIONS,
    TOOL_POLICIES,
)
from mosoo_web.pages.preview.mcp_rows import (
    McpOption,
    McpRow,
    bound_mcp_rows,
    with_default,
    with_required,
    with_tool,
    without,
)
from mosoo_web.pages.preview.services import (
    AgentForm,
    BlockerRow,
    EnvironmentOption,
    ProviderOption,
    Saved,
    SkillOption,
    SkillRow,
    bound_skill_rows,
    chat_capabilities,
    load_agent_form,
    pet_status,
    save_fields,
    save_options,
    send_message,
    thread_of_agent,
    tool_labels,
)
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_app_ids
from mosoo_web.state.thread_chat import ThreadChat, thread_url_script

_AGENT_PATH = re.compile(r"/apps/([^/]+)/agents/([^/?#]+)")


class PreviewState(ThreadChat, rx.State):
    # --- the agent form ---
    current_agent_id: rx.Field[str] = rx.field("")
    agent_missing: rx.Field[bool] = rx.field(False)
    agent_name: rx.Field[str] = rx.field("")
    runtime_label: rx.Field[str] = rx.field("")
    # Bumped on load: uncontrolled fields re-mount with saved values.
    form_version: rx.Field[int] = rx.field(0)
    form_name: rx.Field[str] = rx.field("")
    form_system_prompt: rx.Field[str] = rx.field("")
    form_description: rx.Field[str] = rx.field("")
    form_temperature: rx.Field[str] = rx.field("")
    form_max_tokens: rx.Field[str] = rx.field("")
    reasoning_effort: rx.Field[str] = rx.field(DEFAULT_EFFORT)
    provider_id: rx.Field[str] = rx.field(NO_PROVIDER)
    model: rx.Field[str] = rx.field("")
    kind: rx.Field[str] = rx.field("cattle")
    tools: rx.Field[dict[str, str]] = rx.field(default_factory=dict)
    providers: rx.Field[list[ProviderOption]] = rx.field(default_factory=list)
    blockers: rx.Field[list[BlockerRow]] = rx.field(default_factory=list)
    warnings: rx.Field[list[BlockerRow]] = rx.field(default_factory=list)
    runtime: rx.Field[str] = rx.field("")
    capabilities: rx.Field[list[str]] = rx.field(default_factory=list)  # the catalog's
    # What the chat's running driver reported in hello (`chat_capabilities`), if one runs.
    driver_capabilities: rx.Field[list[str]] = rx.field(default_factory=list)
    driver_reported: rx.Field[bool] = rx.field(False)
    tool_labels: rx.Field[dict[str, str]] = rx.field(default_factory=dict)
    environment_id: rx.Field[str] = rx.field(DEFAULT_ENVIRONMENT)
    environments: rx.Field[list[EnvironmentOption]] = rx.field(default_factory=list)
    default_environment: rx.Field[str] = rx.field("")
    skills: rx.Field[list[str]] = rx.field(default_factory=list)
    skill_options: rx.Field[list[SkillOption]] = rx.field(default_factory=list)
    mcp_servers: rx.Field[list[str]] = rx.field(default_factory=list)
    mcp_policies: rx.Field[dict[str, dict[str, Any]]] = rx.field(default_factory=dict)
    mcp_options: rx.Field[list[McpOption]] = rx.field(default_factory=list)
    # Bumped when a model is picked from the list: the model field re-mounts.
    model_version: rx.Field[int] = rx.field(0)
    save_state: rx.Field[str] = rx.field("")  # "" (nothing saved yet), "saving", "saved"
    # The Pet sandbox: whether there is one, the changes waiting for Apply, Apply's progress.
    has_pet_sandbox: rx.Field[bool] = rx.field(False)
    pending_changes: rx.Field[list[str]] = rx.field(default_factory=list)
    applying: rx.Field[bool] = rx.field(False)
    apply_error: rx.Field[str] = rx.field("")
    # Why the last change of a field was refused, by field (`ERROR_FIELDS`); no key: saved.
    field_errors: rx.Field[dict[str, str]] = rx.field(default_factory=dict)

    @rx.var
    def ready(self) -> bool:
        return not self.blockers

    @rx.var
    def skill_rows(self) -> list[SkillRow]:
        return bound_skill_rows(self.skills, self.skill_options)

    @rx.var
    def unbound_skills(self) -> list[SkillOption]:
        bound = {parse_binding(binding)[0] for binding in self.skills}
        return [option for option in self.skill_options if option.id not in bound]

    @rx.var
    def mcp_rows(self) -> list[McpRow]:
        return bound_mcp_rows(self.mcp_servers, self.mcp_policies, self.mcp_options)

    @rx.var
    def unbound_mcp_servers(self) -> list[McpOption]:
        return [option for option in self.mcp_options if option.id not in self.mcp_servers]

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
        return (
            not self.blockers
            and (not self.run_active or self.can_queue)  # queued while the run prepares
            and not self.sending
            and not self.agent_missing
        )

    @rx.var
    def can_think(self) -> bool:
        return "thinking_stream" in self.capabilities

    @rx.var
    def can_ask(self) -> bool:
        return "permission_requests" in self.capabilities

    @rx.var
    def chat_capabilities(self) -> list[str]:
        """The chat shows what the running sandbox's driver reported, else the catalog's."""
        return self.driver_capabilities if self.driver_reported else self.capabilities

    @rx.var
    def chat_can_think(self) -> bool:
        return "thinking_stream" in self.chat_capabilities

    @rx.var
    def chat_can_ask(self) -> bool:
        return "permission_requests" in self.chat_capabilities

    @rx.var
    def chat_can_stop(self) -> bool:
        return "cancel" in self.chat_capabilities

    @rx.var
    def save_label(self) -> str:
        """The form header's indicator: the first field left unsaved wins over "Saved"."""
        if self.save_state == "saving":
            return "Saving…"
        first = next(
            (self.field_errors[name] for name in ERROR_FIELDS if self.field_errors.get(name)), ""
        )
        if first:
            return "Not saved: " + first
        return "Saved" if self.save_state == "saved" else ""

    @rx.var
    def environment_missing(self) -> bool:
        """An environment is bound that is not (any longer) one of the App's."""
        return self.environment_id != DEFAULT_ENVIRONMENT and all(
            option.id != self.environment_id for option in self.environments
        )

    @rx.var
    def provider_models(self) -> list[str]:
        for option in self.providers:
            if option.id == self.provider_id:
                return list(option.models)
        return []

    # --- loading ---

    async def _context(self) -> tuple[str, str, SessionState]:
        account_id, app_id = await current_app_ids(self)
        return account_id, app_id, await self.get_state(SessionState)

    def _apply_form(self, form: AgentForm) -> None:
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
        self.tool_labels = form.tool_labels
        self.environment_id = form.environment_id
        self.environments = form.environments
        self.default_environment = form.default_environment
        self.skills = form.skills
        self.skill_options = form.skill_options
        self.mcp_servers = form.mcp_servers
        self.mcp_policies = form.mcp_policies
        self.mcp_options = form.mcp_options
        self.save_state = ""
        self.apply_error = ""
        self.form_version += 1
        self.field_errors = {}

    def _show_driver_report(self, reported: list[str] | None) -> None:
        self.driver_reported = reported is not None
        self.driver_capabilities = reported or []

    def _chat_sandbox(self) -> tuple[str, str, str]:
        """What `chat_capabilities` asks about: the Agent, the open thread, the kind."""
        return self.current_agent_id, self.thread_id, self.kind

    def _show_error(self, field_name: str, message: str) -> None:
        """`message` next to the field ("" clears it). A refusal for a field the form has no
        place for shows next to the name."""
        key = field_name if field_name in ERROR_FIELDS else "name"
        errors = {name: error for name, error in self.field_errors.items() if name != key}
        if message:
            errors[key] = message
        if errors != self.field_errors:
            self.field_errors = errors

    @event
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
            form = await asyncio.to_thread(load_agent_form, account_id, app_id, agent_id)
        except NotFound:
            self.agent_missing = True
            return None
        self.agent_missing = False
        self._apply_form(form)
        await self._refresh_pet(account_id, app_id, agent_id)
        # No thread open yet: a Pet's running sandbox (if any) serves the next message.
        self._show_driver_report(
            await asyncio.to_thread(chat_capabilities, account_id, *self._chat_sandbox())
        )
        versions = await self.get_state(VersionsState)
        await versions.refresh(account_id, app_id, agent_id)
        thread_id = str(self.router.url.query_parameters.get("thread", "") or "")
        if thread_id:
            if await asyncio.to_thread(thread_of_agent, account_id, agent_id, thread_id):
                self.thread_id = thread_id
                self._show_driver_report(
                    await asyncio.to_thread(chat_capabilities, account_id, *self._chat_sandbox())
                )
                return PreviewState.watch
            self.thread_missing = True
            return thread_url_script("")
        return None

    # --- the form: every field saves on its own (autosave) ---

    async def _refresh_pet(self, account_id: str, app_id: str, agent_id: str) -> None:
        pending = await asyncio.to_thread(pet_status, account_id, app_id, agent_id)
        self.has_pet_sandbox = pending is not None
        self.pending_changes = pending or []

    async def _persist(self, field_name: str, work: Any, *args: Any) -> bool:
        """Run one save (`save_fields` / `save_options`) for the field the owner changed;
        a refusal shows next to the field it names (else that one) and the stored value
        stays as it was. The session check comes before the save: what a handler showed
        before calling this (the value picked, "Saving…") is the tab's own display, and a
        signed-out tab leaves for /login."""
        account_id, app_id, _session = await self._context()
        try:
            saved: Saved = await asyncio.to_thread(
                work, account_id, app_id, self.current_agent_id, *args
            )
        except InvalidInput as error:
            self._show_error(
                error.field if error.field in ERROR_FIELDS else field_name, error.message
            )
            self.save_state = "saved" if self.save_state == "saving" else self.save_state
            return False
        except NotFound:
            self.agent_missing = True
            return False
        except MosooError as error:
            self._show_error(field_name, error.message)
            self.save_state = "saved" if self.save_state == "saving" else self.save_state
            return False
        self._show_error(field_name, "")
        if field_name == "provider_credential_id":
            self._show_error("model", "")  # the provider pick may also have filled in the model
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
        change: dict[str, Any] = {field_name: value}  # the field is named at run time
        await self._persist(field_name, save_fields, agents.AgentChanges(**change))

    @event
    async def save_name(self, value: str) -> Any:
        async for update in self._save_text("name", value):
            yield update

    @event
    async def save_description(self, value: str) -> Any:
        async for update in self._save_text("description", value):
            yield update

    @event
    async def save_system_prompt(self, value: str) -> Any:
        async for update in self._save_text("system_prompt", value):
            yield update

    @event
    async def save_model(self, value: str) -> Any:
        self.save_state = "saving"
        yield
        if await self._persist("model", save_fields, agents.AgentChanges(model=value)):
            self.model = value.strip()

    @event
    async def set_model(self, value: str) -> Any:
        """A model picked from the provider's list: saved at once, the field shows it."""
        previous = self.model
        self.model = value
        self.model_version += 1
        self.save_state = "saving"
        yield
        if not await self._persist("model", save_fields, agents.AgentChanges(model=value)):
            self.model = previous

    async def _save_option_text(self, key: str, raw: str) -> Any:
        try:
            changes = agents.parse_provider_option(key, raw)
        except InvalidInput as error:
            self._show_error(key, error.message)  # not saved: the stored option stays
            return
        self.save_state = "saving"
        yield
        if await self._persist(key, save_options, changes):
            setattr(self, "form_" + key, (raw or "").strip())

    @event
    async def save_temperature(self, value: str) -> Any:
        async for update in self._save_option_text("temperature", value):
            yield update

    @event
    async def save_max_tokens(self, value: str) -> Any:
        async for update in self._save_option_text("max_tokens", value):
            yield update

    @event
    async def set_reasoning_effort(self, value: str) -> Any:
        if value != DEFAULT_EFFORT and value not in agents.REASONING_EFFORTS:
            return
        previous = self.reasoning_effort
        self.reasoning_effort = value
        self.save_state = "saving"
        yield
        changes = agents.ProviderOptionChanges(
            reasoning_effort=None if value == DEFAULT_EFFORT else value
        )
        if not await self._persist("reasoning_effort", save_options, changes):
            self.reasoning_effort = previous

    @event
    async def choose_provider(self, value: str) -> Any:
        previous_provider, previous_model = self.provider_id, self.model
        self.provider_id = value
        changes: dict[str, Any] = {
            "provider_credential_id": None if value == NO_PROVIDER else value
        }
        models = self.provider_models
        if models and not self.model:
            self.model = models[0]
            self.model_version += 1
            changes["model"] = self.model
        self.save_state = "saving"
        yield
        if not await self._persist(
            "provider_credential_id", save_fields, agents.AgentChanges(**changes)
        ):
            self.provider_id, self.model = previous_provider, previous_model
            self.model_version += 1

    async def _save_choice(self, field_name: str, value: Any, previous: Any) -> Any:
        """A select or switch: shown at once, saved at once, put back if refused."""
        setattr(self, field_name, value)
        self.save_state = "saving"
        yield
        stored = None if field_name == "environment_id" and value == DEFAULT_ENVIRONMENT else value
        change: dict[str, Any] = {field_name: stored}  # the field is named at run time
        if not await self._persist(field_name, save_fields, agents.AgentChanges(**change)):
            setattr(self, field_name, previous)

    @event
    async def set_kind(self, value: str | list[str]) -> Any:
        if isinstance(value, str) and value in ("pet", "cattle") and value != self.kind:
            async for update in self._save_choice("kind", value, self.kind):
                yield update

    @event
    async def set_runtime(self, value: str) -> Any:
        runtime = agents.RUNTIMES.get(value)
        if runtime is None or value == self.runtime:
            return
        async for update in self._save_choice("runtime", value, self.runtime):
            yield update
        if self.runtime == value:
            self.runtime_label = runtime.label
            self.capabilities = sorted(runtime.capabilities)
            self.tool_labels = tool_labels(value)

    @event
    async def set_tool_policy(self, tool: str, value: str | list[str]) -> Any:
        if (
            tool not in TOOL_DESCRIPTIONS
            or not isinstance(value, str)
            or value not in TOOL_POLICIES
        ):
            return
        previous = dict(self.tools)
        self.tools = {**self.tools, tool: value}
        self.save_state = "saving"
        yield
        enabled = {name: policy for name, policy in self.tools.items() if policy != "off"}
        if not await self._persist("tools", save_fields, agents.AgentChanges(tools=enabled)):
            self.tools = previous

    @event
    async def choose_environment(self, value: str) -> Any:
        if value != self.environment_id:
            async for update in self._save_choice("environment_id", value, self.environment_id):
                yield update

    @event
    async def remove_skill(self, binding: str) -> Any:
        async for update in self._save_choice(
            "skills", [s for s in self.skills if s != binding], self.skills
        ):
            yield update

    @event
    async def add_skill(self, skill_id: str) -> Any:
        """Bind one of the App's skills, following its latest version."""
        if skill_id in {option.id for option in self.unbound_skills}:
            async for update in self._save_choice("skills", [*self.skills, skill_id], self.skills):
                yield update

    @event
    async def pin_skill(self, skill_id: str, version: str) -> Any:
        """Follow the skill's latest version ("latest") or keep one version."""
        binding = skill_id if version == "latest" else f"{skill_id}@{version}"
        if not (version == "latest" or version.isdigit()) or binding in self.skills:
            return
        changed = [binding if parse_binding(s)[0] == skill_id else s for s in self.skills]
        async for update in self._save_choice("skills", changed, self.skills):
            yield update

    @event
    async def remove_mcp_server(self, server_id: str) -> Any:
        remaining = [s for s in self.mcp_servers if s != server_id]
        async for update in self._save_mcp(remaining, without(self.mcp_policies, server_id)):
            yield update

    # --- MCP servers: bindings and their tool policies, saved together ---

    async def _save_mcp(self, servers: list[str], policies: dict[str, dict[str, Any]]) -> Any:
        """Shown at once, saved at once (`mcp_servers` and `mcp_policies`), put back if
        refused."""
        previous = (self.mcp_servers, self.mcp_policies)
        self.mcp_servers, self.mcp_policies = servers, policies
        self.save_state = "saving"
        yield
        changes = agents.AgentChanges(mcp_servers=servers, mcp_policies=policies)
        if not await self._persist("mcp_servers", save_fields, changes):
            self.mcp_servers, self.mcp_policies = previous

    @event
    async def add_mcp_server(self, server_id: str) -> Any:
        """Bind one of the App's servers, its tools on Ask (the service's default policy)."""
        if server_id in {option.id for option in self.unbound_mcp_servers}:
            servers = [*self.mcp_servers, server_id]
            async for update in self._save_mcp(servers, dict(self.mcp_policies)):
                yield update

    async def _save_policy(self, server_id: str, policies: dict[str, Any] | None) -> Any:
        if policies is not None and server_id in self.mcp_servers:
            async for update in self._save_mcp(list(self.mcp_servers), policies):
                yield update

    @event
    async def set_mcp_default(self, server_id: str, value: str | list[str]) -> Any:
        """The policy of the server's tools that have none of their own."""
        policy = (
            with_default(self.mcp_policies, server_id, value) if isinstance(value, str) else None
        )
        async for update in self._save_policy(server_id, policy):
            yield update

    @event
    async def set_mcp_tool(self, server_id: str, tool: str, value: str) -> Any:
        """One tool's own policy, or ("default") the server's."""
        async for update in self._save_policy(
            server_id, with_tool(self.mcp_policies, server_id, tool, value)
        ):
            yield update

    @event
    async def set_mcp_required(self, server_id: str, value: bool) -> Any:
        """Required: a run fails (`mcp_unavailable`) when the server cannot be reached."""
        async for update in self._save_policy(
            server_id, with_required(self.mcp_policies, server_id, value)
        ):
            yield update

    @event
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

    @event(background=True)
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
        pending = await asyncio.to_thread(pet_status, account_id, app_id, agent_id)
        async with self:
            self.applying = False
            self.has_pet_sandbox = pending is not None
            self.pending_changes = pending or []
        return rx.toast.success(
            "Applied. The next message starts a fresh sandbox with your workspace restored."
        )

    # --- the chat ---

    @event
    def new_chat(self) -> Any:
        self._reset_chat()
        self.thread_id = ""
        self._show_driver_report(None)
        return thread_url_script("")

    @event(background=True)
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
                send_message, account_id, agent_id, thread_id, text, file_ids
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
            sandbox = self._chat_sandbox()
        reported = await asyncio.to_thread(chat_capabilities, account_id, *sandbox)
        async with self:
            if self.thread_id == sent_thread:
                self._show_driver_report(reported)
        if new_thread:
            return [thread_url_script(sent_thread), PreviewState.watch]
        return None
