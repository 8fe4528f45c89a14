"""The `mosoo_core` calls Preview makes, each run in a worker thread (`asyncio.to_thread`),
and the plain rows they hand back to the state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mosoo_core import agents, environments, mcp, sessions, skills, vault
from mosoo_core.db import session_scope
from mosoo_core.errors import NotFound
from mosoo_core.logs import get_logger
from mosoo_core.runtime import pets
from mosoo_core.runtime.sandbox import SandboxError
from mosoo_core.sessions import actions
from mosoo_web.pages.environments.labels import policy_label
from mosoo_web.pages.preview.fields import (
    DEFAULT_EFFORT,
    DEFAULT_ENVIRONMENT,
    FIELD_LABELS,
    FIELD_TARGETS,
    NO_PROVIDER,
)
from mosoo_web.pages.preview.mcp_rows import McpOption

log = get_logger(__name__)


@dataclass
class ProviderOption:
    id: str = ""
    name: str = ""
    models: list[str] = field(default_factory=list)
    is_default: bool = False


@dataclass
class EnvironmentOption:
    id: str = ""
    label: str = ""  # "Tools · Limited: 2 hosts"


@dataclass
class SkillOption:
    id: str = ""
    name: str = ""
    latest_version: int = 0


@dataclass
class SkillRow:
    """A bound skill as the picker shows it."""

    binding: str = ""  # "<id>" or "<id>@<version>", what is stored
    skill_id: str = ""
    label: str = ""  # the skill's name; the binding itself when the App has no such skill
    version: str = ""  # "latest", or the pinned version's number
    versions: list[str] = field(default_factory=list)  # the choices: "latest", "1", ...
    missing: bool = False


def bound_skill_rows(bindings: list[str], options: list[SkillOption]) -> list[SkillRow]:
    """The bound skills with their names and version choices; a binding to a skill the App
    does not have (uninstalled, another App's) or to a version it does not have is missing."""
    by_id = {option.id: option for option in options}
    rows: list[SkillRow] = []
    for binding in bindings:
        skill_id, number = skills.parse_binding(binding)
        option = by_id.get(skill_id)
        missing = option is None or (number is not None and number > option.latest_version)
        rows.append(
            SkillRow(
                binding=binding,
                skill_id=skill_id,
                label=option.name if option is not None else binding,
                version="latest" if number is None else str(number),
                versions=["latest"]
                + [str(n) for n in range((option.latest_version if option else 0), 0, -1)],
                missing=missing,
            )
        )
    return rows


@dataclass
class BlockerRow:
    code: str = ""
    label: str = ""
    message: str = ""
    target: str = ""  # the id of the field that fixes it


@dataclass(frozen=True)
class AgentForm:
    """What the form shows for the Agent when the page loads."""

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
    capabilities: list[str]  # the catalog's, for the form (`chat_capabilities` for the chat)
    environment_id: str
    environments: list[EnvironmentOption]
    default_environment: str  # the policy of the App's default, for the picker's hint
    skills: list[str]
    mcp_servers: list[str]
    skill_options: list[SkillOption] = field(default_factory=list)  # the App's skills
    mcp_policies: dict[str, Any] = field(default_factory=dict)
    mcp_options: list[McpOption] = field(default_factory=list)  # the App's MCP servers
    # Mosoo's tool -> what the runtime's agent calls it ("Bash" under `claude`).
    tool_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Saved:
    """What the form shows after one autosave: the cleaned value and fresh readiness."""

    agent: agents.AgentView
    blockers: list[BlockerRow]
    warnings: list[BlockerRow]


def tool_labels(runtime: str) -> dict[str, str]:
    """Each built-in tool under the name the runtime's own agent gives it, e.g. `bash` is
    "Bash" in Claude Code and `edit` "Edit, NotebookEdit"; Mosoo's name where it has none."""
    known = agents.RUNTIMES.get(runtime)
    return {tool: known.tool_label(tool) if known else tool for tool in agents.BUILTIN_TOOLS}


def chat_capabilities(
    account_id: str, agent_id: str, thread_id: str, kind: str
) -> list[str] | None:
    """What the running driver of the chat's sandbox reported in hello: the Preview
    thread's, else (no thread yet) a Pet's shared sandbox's. None when none runs (or the
    thread or Agent is gone, or it reported nothing): the chat keeps to the catalog then."""
    if not thread_id and kind != "pet":
        return None
    with session_scope() as db:
        try:
            if thread_id:
                reported = sessions.live_capabilities(db, account_id, thread_id=thread_id)
            else:
                reported = sessions.live_capabilities(db, account_id, agent_id=agent_id)
        except NotFound:
            return None
    # An empty report is a driver from before capabilities were kept (migration 0013).
    return sorted(reported) if reported else None


def readiness_rows(items: list[agents.Blocker]) -> list[BlockerRow]:
    return [
        BlockerRow(
            code=b.code,
            label=FIELD_LABELS.get(b.field, b.field),
            message=b.message,
            target=FIELD_TARGETS.get(b.field, ""),
        )
        for b in items
    ]


def load_agent_form(account_id: str, app_id: str, agent_id: str) -> AgentForm:
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        credentials = vault.list_provider_credentials(db, account_id, app_id)
        readiness = agents.readiness(db, agent)
        app_environments = environments.list_environments(db, account_id, app_id)
        app_skills = skills.list_skills(db, account_id, app_id)
        app_servers = mcp.list_servers(db, account_id, app_id)
    runtime = agents.RUNTIMES.get(agent.runtime)
    options = agent.provider_options
    effort = options.get("reasoning_effort")
    return AgentForm(
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
            ProviderOption(id=c.id, name=c.name, models=list(c.models), is_default=c.is_default)
            for c in credentials
        ],
        blockers=readiness_rows(readiness.blockers),
        warnings=readiness_rows(readiness.warnings),
        runtime=agent.runtime,
        capabilities=sorted(runtime.capabilities) if runtime else [],
        environment_id=agent.environment_id or DEFAULT_ENVIRONMENT,
        # The App's default is the "Default environment" choice, listed apart only when bound.
        environments=[
            EnvironmentOption(id=e.id, label=f"{e.name} · {policy_label(e.revision)}")
            for e in app_environments
            if not e.is_default or e.id == agent.environment_id
        ],
        default_environment=next(
            (policy_label(e.revision) for e in app_environments if e.is_default), ""
        ),
        skills=list(agent.skills),
        mcp_servers=list(agent.mcp_servers),
        skill_options=[SkillOption(s.id, s.name, s.latest_version) for s in app_skills],
        mcp_policies=dict(agent.mcp_policies),
        mcp_options=[
            McpOption(s.id, s.name, s.enabled, [t.name for t in s.tools]) for s in app_servers
        ],
        tool_labels=tool_labels(agent.runtime),
    )


def _saved(db: Any, agent: agents.AgentView) -> Saved:
    readiness = agents.readiness(db, agent)
    return Saved(
        agent=agent,
        blockers=readiness_rows(readiness.blockers),
        warnings=readiness_rows(readiness.warnings),
    )


def save_fields(account_id: str, app_id: str, agent_id: str, changes: agents.AgentChanges) -> Saved:
    """One autosave: `update_agent` with the changed field(s), then readiness."""
    with session_scope() as db:
        return _saved(db, agents.update_agent(db, account_id, app_id, agent_id, changes))


def save_options(
    account_id: str, app_id: str, agent_id: str, changes: agents.ProviderOptionChanges
) -> Saved:
    """One autosave of provider options (merged and range-checked by the service), then
    readiness."""
    with session_scope() as db:
        return _saved(db, agents.update_provider_options(db, account_id, app_id, agent_id, changes))


def pet_status(account_id: str, app_id: str, agent_id: str) -> list[str] | None:
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


def thread_of_agent(account_id: str, agent_id: str, thread_id: str) -> bool:
    with session_scope() as db:
        try:
            return sessions.get_session(db, account_id, thread_id).agent_id == agent_id
        except NotFound:
            return False


def send_message(
    account_id: str, agent_id: str, thread_id: str, text: str, file_ids: list[str] | None = None
) -> str:
    """Store the message (starting a Preview thread, which runs the draft, when there is
    none), then hand the run to the worker. Returns the thread id."""
    if thread_id:
        actions.send_and_dispatch(account_id, thread_id, text, file_ids=file_ids or ())
        return thread_id
    started = actions.start_thread(
        account_id, agent_id, purpose="preview", message=text, file_ids=file_ids or ()
    )
    return started.thread.id
