"""Agents (the minimal profile): create, read, update, fork, delete, readiness."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, func, or_, select

from mosoo_core.agents._catalog import BUILTIN_TOOLS, RUNTIMES, TOOL_POLICIES
from mosoo_core.agents.changes import AgentChanges, ProviderOptionChanges
from mosoo_core.clock import utcnow
from mosoo_core.environments import environment_exists
from mosoo_core.errors import FieldConflict, InvalidInput
from mosoo_core.identity import get_app
from mosoo_core.mcp import bound_servers, clean_server_policy, usable_servers
from mosoo_core.ownership import owned_agent
from mosoo_core.skills import bound_skills, clean_skill_bindings, missing_skill_names
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.sessions import AgentSession, DriverInstance
from mosoo_core.tables.vault import ProviderCredential

DEFAULT_TOOLS = {
    "bash": "ask",
    "read": "allow",
    "write": "ask",
    "edit": "ask",
    "glob": "allow",
    "grep": "allow",
}
REASONING_EFFORTS = ("none", "low", "medium", "high")
MAX_TOKENS_LIMIT = 200_000
MAX_BINDINGS = 32  # skills, MCP servers: per Agent
_RESOURCE_ID = re.compile(r"^[0-9A-Za-z]{1,26}$")
# What a Pet sandbox is built from (mounted or installed into it): changing one of these
# leaves a running Pet sandbox behind until it is recreated (`runtime.pets.apply_pet_changes`).
# Model, prompt, tools and options are not here: every run boots a fresh driver with them.
SANDBOX_FIELDS = ("kind", "environment_id", "skills")


@dataclass(frozen=True)
class AgentView:
    id: str
    app_id: str
    name: str
    description: str
    runtime: str
    kind: str
    provider_credential_id: str | None
    model: str
    system_prompt: str
    tools: dict[str, str]
    provider_options: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    status: str = "draft"  # draft | published
    published_version: int | None = None
    environment_id: str | None = None
    skills: list[str] = field(default_factory=list)
    mcp_servers: list[str] = field(default_factory=list)
    mcp_policies: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Blocker:
    code: str
    message: str
    field: str


@dataclass(frozen=True)
class Readiness:
    """`blockers` stop the Agent from running; `warnings` let it run, without something."""

    ready: bool
    blockers: list[Blocker] = field(default_factory=list)
    warnings: list[Blocker] = field(default_factory=list)


def agent_view(agent: Agent) -> AgentView:
    return AgentView(
        id=agent.id,
        app_id=agent.app_id,
        name=agent.name,
        description=agent.description,
        runtime=agent.runtime,
        kind=agent.kind,
        provider_credential_id=agent.provider_credential_id,
        model=agent.model,
        system_prompt=agent.system_prompt,
        tools=dict(agent.tools),
        provider_options=dict(agent.provider_options),
        created_at=agent.created_at,
        updated_at=agent.updated_at,
        status=agent.status,
        published_version=agent.published_version,
        environment_id=agent.environment_id,
        skills=list(agent.skills or []),
        mcp_servers=list(agent.mcp_servers or []),
        mcp_policies=copy.deepcopy(dict(agent.mcp_policies or {})),
    )


def credential_belongs_to_app(db: Session, app_id: str, credential_id: str) -> bool:
    credential = db.get(ProviderCredential, credential_id)
    return credential is not None and credential.app_id == app_id


def _clean_name(name: str) -> str:
    name = " ".join((name or "").split())
    if not name:
        raise InvalidInput("Give the agent a name.", field="name")
    if len(name) > 80:
        raise InvalidInput("Names are at most 80 characters.", field="name")
    return name


def _clean_tools(tools: dict[str, str]) -> dict[str, str]:
    cleaned: dict[str, str] = {}
    for name, policy in tools.items():
        if name not in BUILTIN_TOOLS:
            raise InvalidInput(f"Unknown tool {name!r}.", field="tools")
        if policy not in TOOL_POLICIES:
            raise InvalidInput(f"Tool policy must be allow or ask, not {policy!r}.", field="tools")
        cleaned[name] = policy
    return cleaned


# The options the console edits, each with the message that names its range.
PROVIDER_OPTION_RULES = {
    "temperature": "Temperature is a number from 0 to 2.",
    "max_tokens": f"Max tokens is a whole number from 1 to {MAX_TOKENS_LIMIT:,}.",
    "reasoning_effort": "Reasoning effort is none, low, medium or high.",
}


# The `acp` runtime's agent, when it is not OpenCode (driver/backends/acp.py): a command line
# run in the sandbox, e.g. ["my-agent", "--acp"].
ACP_COMMAND_OPTION = "acp_command"
MAX_COMMAND_PARTS = 32


def _option_in_range(key: str, value: Any) -> bool:
    if key == "temperature":
        return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= 2
    if key == "max_tokens":
        return (
            not isinstance(value, bool)
            and isinstance(value, int)
            and 1 <= value <= MAX_TOKENS_LIMIT
        )
    return value in REASONING_EFFORTS


def _clean_provider_options(options: Any, field_name: str | None) -> dict[str, Any]:
    """Check the options the console edits (PROVIDER_OPTION_RULES); a None value removes
    that key, other keys are kept as they are. A refusal names `field_name`, or the option
    itself when it is None."""
    if not isinstance(options, Mapping):
        raise InvalidInput(
            "Provider options must be an object.", field=field_name or "provider_options"
        )
    cleaned = {key: value for key, value in options.items() if value is not None}
    for key, message in PROVIDER_OPTION_RULES.items():
        if key in cleaned and not _option_in_range(key, cleaned[key]):
            raise InvalidInput(message, field=field_name or key)
    if ACP_COMMAND_OPTION in cleaned and not _is_command_line(cleaned[ACP_COMMAND_OPTION]):
        raise InvalidInput(
            f"{ACP_COMMAND_OPTION} is the ACP agent's command line: a list of 1 to "
            f"{MAX_COMMAND_PARTS} strings, the program first.",
            field=field_name or "provider_options",
        )
    return cleaned


def _is_command_line(value: Any) -> bool:
    return (
        isinstance(value, list)
        and 1 <= len(value) <= MAX_COMMAND_PARTS
        and all(isinstance(part, str) and 0 < len(part) <= 1000 for part in value)
    )


def parse_provider_option(key: str, text: str) -> ProviderOptionChanges:
    """The change a text field for the option `key` asks for: empty removes the option,
    anything else is read as its type (ranges are checked by `update_provider_options`).
    Text that does not parse is refused with the option's message, the option named."""
    if key not in PROVIDER_OPTION_RULES:
        raise InvalidInput(f"Unknown provider option {key!r}.", field="provider_options")
    clean = (text or "").strip()
    value: Any = None
    if clean:
        try:
            value = (
                float(clean)
                if key == "temperature"
                else int(clean)
                if key == "max_tokens"
                else clean
            )
        except ValueError:
            raise InvalidInput(PROVIDER_OPTION_RULES[key], field=key) from None
    return ProviderOptionChanges(**{key: value})


def _clean_resource_id(value: Any, field_name: str, what: str) -> str:
    if not isinstance(value, str) or not _RESOURCE_ID.match(value):
        raise InvalidInput(f"{what} ids are 1 to 26 letters and digits.", field=field_name)
    return value


def _clean_binding_list(values: Any, field_name: str, what: str) -> list[str]:
    """A list of resource ids, duplicates dropped (first one kept), at most MAX_BINDINGS."""
    if values is None:
        return []
    if not isinstance(values, list | tuple):
        raise InvalidInput(f"{what} must be a list of ids.", field=field_name)
    cleaned = list(dict.fromkeys(_clean_resource_id(value, field_name, what) for value in values))
    if len(cleaned) > MAX_BINDINGS:
        raise InvalidInput(
            f"An agent binds at most {MAX_BINDINGS} {what.lower()}.", field=field_name
        )
    return cleaned


def _clean_environment_id(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return _clean_resource_id(value, "environment_id", "Environment")


def create_agent(
    db: Session,
    account_id: str,
    app_id: str,
    *,
    name: str,
    runtime: str = "openai",
    kind: str = "cattle",
) -> AgentView:
    """A new Agent with the default tools (read-only ones allowed, the rest ask first)."""
    get_app(db, account_id, app_id)
    if runtime not in RUNTIMES:
        raise InvalidInput(f"Unknown runtime {runtime!r}.", field="runtime")
    if kind not in ("pet", "cattle"):
        raise InvalidInput("Kind is pet (Assistant) or cattle (Task).", field="kind")
    agent = Agent(
        app_id=app_id, name=_clean_name(name), runtime=runtime, kind=kind, tools=dict(DEFAULT_TOOLS)
    )
    db.add(agent)
    db.flush()
    return agent_view(agent)


def list_agents(db: Session, account_id: str, app_id: str) -> list[AgentView]:
    get_app(db, account_id, app_id)
    rows = db.exec(
        select(Agent).where(Agent.app_id == app_id).order_by(col(Agent.created_at))
    ).all()
    return [agent_view(row) for row in rows]


def last_activity_by_agent(db: Session, account_id: str, app_id: str) -> dict[str, datetime]:
    """Per Agent of the App: when its newest thread was last updated, else when the Agent was
    (one grouped query)."""
    get_app(db, account_id, app_id)
    newest = func.max(AgentSession.updated_at)
    rows = db.exec(
        select(Agent.id, Agent.updated_at, newest)
        .join(AgentSession, col(AgentSession.agent_id) == col(Agent.id), isouter=True)
        .where(Agent.app_id == app_id)
        .group_by(col(Agent.id), col(Agent.updated_at))
    ).all()
    return {
        agent_id: thread_updated or agent_updated
        for agent_id, agent_updated, thread_updated in rows
    }


def get_agent(db: Session, account_id: str, app_id: str, agent_id: str) -> AgentView:
    return agent_view(owned_agent(db, account_id, app_id, agent_id))


UPDATABLE = frozenset(f.name for f in fields(AgentChanges))


def update_agent(
    db: Session, account_id: str, app_id: str, agent_id: str, changes: AgentChanges
) -> AgentView:
    """Change the profile fields `changes` sets; each is validated, a refusal names its field
    and nothing is saved when one is invalid."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    values = changes.set_fields()
    if "name" in values:
        values["name"] = _clean_name(values["name"])
    if "description" in values:
        values["description"] = values["description"] or ""
        if len(values["description"]) > 500:
            raise InvalidInput("Descriptions are at most 500 characters.", field="description")
    if "runtime" in values and values["runtime"] not in RUNTIMES:
        raise InvalidInput(f"Unknown runtime {values['runtime']!r}.", field="runtime")
    if "kind" in values and values["kind"] not in ("pet", "cattle"):
        raise InvalidInput("Kind is pet (Assistant) or cattle (Task).", field="kind")
    for locked in ("kind", "runtime"):
        if (
            locked in values
            and values[locked] != getattr(agent, locked)
            and _ever_published(db, agent.id)
        ):
            raise FieldConflict(
                "Kind and runtime are locked after the first publish; fork the agent to change them.",
                field=locked,
            )
    if "model" in values:
        values["model"] = (values["model"] or "").strip()
        if len(values["model"]) > 200:
            raise InvalidInput("Model names are at most 200 characters.", field="model")
    if "system_prompt" in values:
        values["system_prompt"] = values["system_prompt"] or ""
        if len(values["system_prompt"]) > 100_000:
            raise InvalidInput(
                "The system prompt is limited to 100,000 characters.", field="system_prompt"
            )
    if "tools" in values:
        values["tools"] = _clean_tools(dict(values["tools"] or {}))
    if "provider_options" in values:
        values["provider_options"] = _clean_provider_options(
            {} if values["provider_options"] is None else values["provider_options"],
            "provider_options",
        )
    if "environment_id" in values:
        values["environment_id"] = _clean_environment_id(values["environment_id"])
    if "skills" in values:
        values["skills"] = clean_skill_bindings(values["skills"])
    if "mcp_servers" in values:
        values["mcp_servers"] = _clean_binding_list(
            values["mcp_servers"], "mcp_servers", "MCP servers"
        )
    if "mcp_policies" in values or "mcp_servers" in values:
        values["mcp_policies"] = _clean_mcp_policies(
            values.get("mcp_policies", agent.mcp_policies),
            values.get("mcp_servers", agent.mcp_servers or []),
        )
    if values.get("provider_credential_id") and not credential_belongs_to_app(
        db, app_id, values["provider_credential_id"]
    ):
        raise FieldConflict(  # a well-formed id the App has no key for
            "That provider key does not exist in this App.", field="provider_credential_id"
        )
    return _save(db, agent, values)


def update_provider_options(
    db: Session, account_id: str, app_id: str, agent_id: str, changes: ProviderOptionChanges
) -> AgentView:
    """Merge `changes` into the Agent's stored provider options: a None value removes that
    option, every option not given (console-edited or not) stays. Each given value is
    checked against its range; a refusal names the option (`temperature`, `max_tokens`,
    `reasoning_effort`) and nothing is saved."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    given = changes.set_fields()
    for key, value in given.items():
        if value is not None and not _option_in_range(key, value):
            raise InvalidInput(PROVIDER_OPTION_RULES[key], field=key)
    merged = {
        key: value
        for key, value in {**(agent.provider_options or {}), **given}.items()
        if value is not None
    }
    return _save(db, agent, {"provider_options": merged})


def _save(db: Session, agent: Agent, values: dict[str, Any]) -> AgentView:
    for key, value in values.items():
        setattr(agent, key, value)
    agent.updated_at = utcnow()
    db.add(agent)
    db.flush()
    return agent_view(agent)


def _ever_published(db: Session, agent_id: str) -> bool:
    return (
        db.exec(select(AgentVersion.id).where(AgentVersion.agent_id == agent_id).limit(1)).first()
        is not None
    )


def existing_skills(db: Session, app_id: str, skill_ids: list[str]) -> list[str]:
    """The skill bindings (`<id>` or `<id>@<version>`) that resolve in the App: a live skill,
    and for a pin, a version it has. The others are missing."""
    return [bound.binding for bound in bound_skills(db, app_id, skill_ids)]


def _clean_mcp_policies(policies: Any, bound: list[str]) -> dict[str, Any]:
    """Each bound server's policy checked (mcp.clean_server_policy); entries of servers the
    Agent does not bind are dropped, so unbinding one forgets its policy."""
    if policies is None:
        return {}
    if not isinstance(policies, Mapping):
        raise InvalidInput("MCP policies are an object keyed by server id.", field="mcp_policies")
    cleaned = {server_id: clean_server_policy(policy) for server_id, policy in policies.items()}
    return {server_id: policy for server_id, policy in cleaned.items() if server_id in bound}


def existing_mcp_servers(db: Session, app_id: str, server_ids: list[str]) -> list[str]:
    """The bound MCP servers that exist in the App and are enabled."""
    return usable_servers(db, app_id, server_ids)


def readiness(db: Session, agent: AgentView) -> Readiness:
    """What stops this Agent from running, each with the field that fixes it, and what it
    would run without (a missing skill)."""
    blockers: list[Blocker] = []
    warnings: list[Blocker] = []
    runtime = RUNTIMES.get(agent.runtime)
    if runtime is None or not runtime.implemented:
        blockers.append(
            Blocker(
                "runtime_unsupported",
                f"The {agent.runtime} runtime is not available yet.",
                "runtime",
            )
        )
    if not agent.provider_credential_id:
        blockers.append(
            Blocker("no_provider_key", "Choose a provider key.", "provider_credential_id")
        )
    elif not credential_belongs_to_app(db, agent.app_id, agent.provider_credential_id):
        blockers.append(
            Blocker(
                "provider_key_missing",
                "The chosen provider key was deleted.",
                "provider_credential_id",
            )
        )
    elif runtime is not None and runtime.providers_only:
        credential = db.get(ProviderCredential, agent.provider_credential_id)
        if credential is not None and credential.provider not in runtime.providers:
            blockers.append(
                Blocker(
                    "provider_unsupported",
                    f"The {runtime.label} runtime needs a key of "
                    f"{' or '.join(runtime.providers)}, not {credential.provider}.",
                    "provider_credential_id",
                )
            )
    if not agent.model:
        blockers.append(Blocker("model_not_set", "Set the model.", "model"))
    if agent.environment_id and not environment_exists(db, agent.app_id, agent.environment_id):
        blockers.append(
            Blocker(
                "environment_missing",
                "The chosen environment does not exist; choose another or the default.",
                "environment_id",
            )
        )
    for label in missing_skill_names(db, agent.app_id, agent.skills).values():
        warnings.append(
            Blocker("skill_missing", f"Skill {label} is missing; runs go without it.", "skills")
        )
    found_servers = bound_servers(db, agent.app_id, agent.mcp_servers)
    for server_id in agent.mcp_servers:
        server = found_servers.get(server_id)
        if server is not None and not server.enabled:
            blockers.append(
                Blocker(
                    "mcp_server_disabled",
                    f"MCP server {server.name} is disabled; enable it or remove it.",
                    "mcp_servers",
                )
            )
        elif server is None:
            blockers.append(
                Blocker(
                    "mcp_server_invalid",
                    f"MCP server {server_id} does not exist; remove it or connect it again.",
                    "mcp_servers",
                )
            )
    return Readiness(ready=not blockers, blockers=blockers, warnings=warnings)


def sandbox_fingerprint(
    agent: AgentView, environment_revision_id: str = "", skill_version_ids: Sequence[str] = ()
) -> str:
    """What a Pet sandbox is built from, one short hash per field of SANDBOX_FIELDS
    ("kind:1a2b3c4d,environment_id:..."): set as a label when the sandbox is created, so the
    fields changed since are computed, not guessed (`pending_sandbox_fields`). The
    environment counts with its revision: a new revision of the same environment is a change
    to apply too (its setup script and network are the sandbox's). Skills count with the
    versions they resolve to (`skill_version_ids`, mounted in the sandbox): a new version of
    a skill the Agent follows is a change to apply too."""
    values = {name: getattr(agent, name) for name in SANDBOX_FIELDS}
    values["environment_id"] = [agent.environment_id, environment_revision_id]
    if agent.skills:  # without skills the value stays what sandboxes made before were labelled
        values["skills"] = [agent.skills, list(skill_version_ids)]
    return ",".join(f"{name}:{_short_hash(values[name])}" for name in SANDBOX_FIELDS)


def pending_sandbox_fields(
    agent: AgentView,
    built_from: str | None,
    environment_revision_id: str = "",
    skill_version_ids: Sequence[str] = (),
) -> list[str]:
    """The SANDBOX_FIELDS whose values differ from what a sandbox labelled `built_from` was
    built with. A sandbox without the label (made before it existed) counts as all changed."""
    built = dict(part.split(":", 1) for part in (built_from or "").split(",") if ":" in part)
    fingerprint = sandbox_fingerprint(agent, environment_revision_id, skill_version_ids)
    current = dict(part.split(":", 1) for part in fingerprint.split(","))
    return [name for name in SANDBOX_FIELDS if built.get(name) != current[name]]


def _short_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class DeletedAgent:
    """What `delete_agent` removed from the database and what lives outside it: the
    checkpoints of `thread_ids` in the object store, the Pet sandbox labelled `subject`
    and the sandboxes of `driver_instance_ids` (drivers that were still live)."""

    agent_id: str
    app_id: str
    subject: str
    thread_ids: list[str]
    driver_instance_ids: list[str]
    had_sandboxes: bool


def delete_agent(db: Session, account_id: str, app_id: str, agent_id: str) -> DeletedAgent:
    """Delete an Agent with its threads, events, runs and versions (foreign-key cascade).
    Live drivers of its threads are marked stopped. Objects and sandboxes are the caller's:
    use `mosoo_core.runtime.runs.delete_agent_everywhere`, which does all three."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    subject = f"agent:{agent.id}"
    thread_ids = list(
        db.exec(select(AgentSession.id).where(AgentSession.agent_id == agent.id)).all()
    )
    drivers = db.exec(
        select(DriverInstance).where(
            or_(
                col(DriverInstance.subject) == subject,
                col(DriverInstance.session_id).in_(thread_ids),
            )
        )
    ).all()
    live = [driver.id for driver in drivers if driver.status != "stopped"]
    for driver in drivers:
        if driver.status != "stopped":
            driver.status, driver.resume_token_hash = "stopped", None
            db.add(driver)
    db.delete(agent)
    db.flush()
    return DeletedAgent(
        agent_id=agent.id,
        app_id=app_id,
        subject=subject,
        thread_ids=thread_ids,
        driver_instance_ids=live,
        had_sandboxes=bool(drivers),
    )


def count_threads(db: Session, account_id: str, app_id: str, agent_id: str) -> int:
    """How many threads go with the Agent if it is deleted."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    return len(db.exec(select(AgentSession.id).where(AgentSession.agent_id == agent.id)).all())


def fork_agent(db: Session, account_id: str, app_id: str, agent_id: str) -> AgentView:
    """A new draft with a copy of the Agent's current profile, named "<name> (copy)";
    versions and threads stay with the original. Kind and runtime are free again."""
    source = owned_agent(db, account_id, app_id, agent_id)
    suffix = " (copy)"
    name = (
        source.name
        if len(source.name) + len(suffix) <= 80
        else source.name[: 80 - len(suffix)].rstrip()
    )
    fork = Agent(
        app_id=app_id,
        name=name + suffix,
        description=source.description,
        runtime=source.runtime,
        kind=source.kind,
        provider_credential_id=source.provider_credential_id,
        model=source.model,
        system_prompt=source.system_prompt,
        tools=copy.deepcopy(source.tools),
        provider_options=copy.deepcopy(source.provider_options),
        environment_id=source.environment_id,
        skills=list(source.skills or []),
        mcp_servers=list(source.mcp_servers or []),
        mcp_policies=copy.deepcopy(source.mcp_policies or {}),
    )
    db.add(fork)
    db.flush()
    return agent_view(fork)
