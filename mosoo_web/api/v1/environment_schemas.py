"""Request and response shapes of environments and of configuring agents from code."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from fastapi import Path
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from mosoo_core.agents import BUILTIN_TOOLS, RUNTIMES, AgentChanges, Readiness
from mosoo_core.agents.service import MAX_BINDINGS, MAX_TOKENS_LIMIT
from mosoo_core.agents.versions import VersionView
from mosoo_core.changes import UNSET
from mosoo_core.environments import (
    BuildView,
    EnvironmentChanges,
    EnvironmentView,
    RevisionView,
    VariableInput,
)
from mosoo_core.environments.validation import (
    MAX_PACKAGES,
    MAX_SETUP_SCRIPT,
    MAX_VARIABLE_VALUE,
    NPM_PATTERN,
    PIP_PATTERN,
    RESERVED_PREFIXES,
    RESERVED_VARIABLES,
)
from mosoo_core.skills import MAX_BINDINGS as MAX_SKILL_BINDINGS
from mosoo_web.api.v1.mcp_schemas import McpServerPolicy
from mosoo_web.api.v1.schemas import Text, _Request
from mosoo_web.api.v1.skill_schemas import SkillBindingText

EnvironmentId = Annotated[str, Path(pattern=r"^[^\x00]*$", description="An environment id.")]
NetworkPolicy = Literal["none", "limited", "full"]
PipEntry = Annotated[str, Field(max_length=200, pattern=PIP_PATTERN)]
NpmEntry = Annotated[str, Field(max_length=214, pattern=NPM_PATTERN)]
BuildStatus = Literal["queued", "building", "ready", "failed"]
# A name with something besides white space (the service collapses runs of it).
Name = Annotated[str, Field(min_length=1, max_length=80, pattern=r"^\s*\S[^\x00]*$")]
# The allowlist entries the egress proxy can enforce: a host name whose last label is not a
# number (that would be an IP address), optionally `*.` for its subdomains (of a name of two
# labels at least: `*.com` is refused) and a port.
_HOST_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\."
AllowedHostEntry = Annotated[
    str,
    Field(
        max_length=253,
        pattern=rf"^(\*\.({_HOST_LABEL})+|({_HOST_LABEL})*)"
        r"[A-Za-z0-9-]{0,62}[A-Za-z][A-Za-z0-9-]{0,62}"
        r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}))?$",
    ),
]


def _case_free(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# Letters, digits and _, not starting with a digit, and none of the names Mosoo sets itself.
VARIABLE_NAME_SCHEMA: dict[str, Any] = {
    "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
    "not": {
        "pattern": "^("
        + "|".join(
            [f"{_case_free(name)}$" for name in sorted(RESERVED_VARIABLES)]
            + [_case_free(prefix) for prefix in RESERVED_PREFIXES]
        )
        + ")"
    },
}
# On the `variables` fields themselves: a key type's pattern would become patternProperties,
# which lets every other key through.
VARIABLES_SCHEMA: dict[str, Any] = {"propertyNames": VARIABLE_NAME_SCHEMA}
Value = Annotated[str, Field(max_length=MAX_VARIABLE_VALUE, pattern=r"^[^\x00]*$")]


class VariableIn(_Request):
    value: Value | None = Field(
        default=None,
        description="Leave it out (or null) to keep the stored value of this variable; "
        "secrets are write-only, so this is how a secret is kept.",
    )
    secret: StrictBool = Field(
        default=False, description="Stored sealed, never shown again: answers show `••••••••`."
    )
    setup_only: StrictBool = Field(
        default=False,
        description="Present while the setup script runs, absent from the agent's processes.",
    )


class NewVariable(VariableIn):
    value: Value = Field(description="The value (write-only for a secret).")


def _variable_names(variables: dict[str, Any] | None) -> None:
    for name in variables or {}:
        if not re.match(VARIABLE_NAME_SCHEMA["pattern"], name) or re.match(
            VARIABLE_NAME_SCHEMA["not"]["pattern"], name
        ):
            raise ValueError(f"{name!r} is not a variable name you can set")


_HOSTS_NEED_LIMITED: dict[str, Any] = {
    # Allowed hosts come with the limited policy (a PATCH may rely on the stored one).
    "allowed_hosts": {
        "anyOf": [
            {"properties": {"allowed_hosts": {"maxItems": 0}}},
            {"not": {"required": ["network_policy"]}},
            {"properties": {"network_policy": {"const": "limited"}}},
        ]
    }
}


class EnvironmentContent(_Request):
    """The content of a revision; in PATCH, a field left out keeps the current value."""

    model_config = ConfigDict(json_schema_extra={"dependentSchemas": _HOSTS_NEED_LIMITED})

    pip: list[PipEntry] | None = Field(
        default=None,
        max_length=MAX_PACKAGES,
        json_schema_extra={"uniqueItems": True},
        description="Exact `name==version` entries, installed once per revision content by a "
        "build (its status is the environment's `build`). A name listed twice is a `conflict`.",
    )
    npm: list[NpmEntry] | None = Field(
        default=None,
        max_length=MAX_PACKAGES,
        json_schema_extra={"uniqueItems": True},
        description="Exact `name@version` entries, built like `pip`.",
    )
    setup_script: str | None = Field(
        default=None,
        max_length=MAX_SETUP_SCRIPT,
        pattern=r"^[^\x00]*$",
        description="Runs with bash as the sandbox user in each new sandbox before the agent.",
    )
    variables: dict[str, VariableIn] | None = Field(
        default=None,
        max_length=100,
        json_schema_extra=VARIABLES_SCHEMA,
        description="By name; replaces the whole set (a variable left out is removed).",
    )
    network_policy: NetworkPolicy | None = Field(
        default=None,
        description="`none`: no network. `limited`: HTTP(S) only to `allowed_hosts`, "
        "through Mosoo's egress proxy. `full`: the internet.",
    )
    allowed_hosts: list[AllowedHostEntry] | None = Field(
        default=None,
        max_length=100,
        description="For `limited`: exact hosts or `*.suffix`, optionally `:port` (80 and 443 "
        "otherwise). IP addresses are refused.",
    )
    allow_package_indexes: StrictBool | None = Field(
        default=None, description="For `limited`: also allow the configured package indexes."
    )

    @field_validator("variables")
    @classmethod
    def _names(cls, variables: dict[str, Any] | None) -> dict[str, Any] | None:
        _variable_names(variables)
        return variables

    @model_validator(mode="after")
    def _check(self) -> EnvironmentContent:
        if self.allowed_hosts and self.network_policy not in (None, "limited"):
            raise ValueError("allowed_hosts come with network_policy limited")
        return self

    def changes(self) -> EnvironmentChanges:
        given = self.model_dump(exclude_unset=True, exclude={"name", "app_id", "variables"})
        values: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        if self.variables is not None:
            values["variables"] = [
                VariableInput(name, v.value, secret=v.secret, setup_only=v.setup_only)
                for name, v in self.variables.items()
            ]
        return EnvironmentChanges(**{key: values.get(key, UNSET) for key in _CHANGE_FIELDS})


_CHANGE_FIELDS = (
    "pip",
    "npm",
    "setup_script",
    "variables",
    "network_policy",
    "allowed_hosts",
    "allow_package_indexes",
)


class CreateEnvironment(EnvironmentContent):
    app_id: Text | None = Field(
        default=None, max_length=26, description="The App; the account's first App if left out."
    )
    name: Name
    variables: dict[str, NewVariable] | None = Field(  # type: ignore[assignment]
        default=None,
        max_length=100,
        json_schema_extra=VARIABLES_SCHEMA,
        description="By name, each with its value.",
    )


class UpdateEnvironment(EnvironmentContent):
    name: Name | None = Field(default=None, description="Renames.")


class Variable(BaseModel):
    name: str
    secret: bool
    setup_only: bool
    value: str = Field(description="The value; `••••••••` for a secret.")


class Revision(BaseModel):
    id: str
    number: int
    summary: str = Field(description="What this revision changed.")
    pip: list[str]
    npm: list[str]
    setup_script: str
    variables: list[Variable]
    network_policy: NetworkPolicy
    allowed_hosts: list[str]
    allow_package_indexes: bool
    created_at: datetime

    @classmethod
    def of(cls, view: RevisionView) -> Revision:
        return cls(
            id=view.id,
            number=view.number,
            summary=view.summary,
            pip=view.pip,
            npm=view.npm,
            setup_script=view.setup_script,
            variables=[
                Variable(name=v.name, secret=v.secret, setup_only=v.setup_only, value=v.value)
                for v in view.variables
            ],
            network_policy=view.network_policy,
            allowed_hosts=view.allowed_hosts,
            allow_package_indexes=view.allow_package_indexes,
            created_at=view.created_at,
        )


class Build(BaseModel):
    status: BuildStatus = Field(
        description="`queued`, `building`, `ready` (runs mount it) or `failed` (runs on this "
        "revision fail with `environment_build_failed` until a rebuild succeeds)."
    )
    log: str = Field(description="What pip and npm printed (the end of it, 64 KiB).")
    error: str = Field(description="Why it failed; empty otherwise.")
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, view: BuildView) -> Build:
        return cls(
            status=view.status,  # one of BUILD_STATUSES
            log=view.log,
            error=view.error,
            attempts=view.attempts,
            started_at=view.started_at,
            finished_at=view.finished_at,
        )


class Environment(BaseModel):
    id: str
    app_id: str
    name: str
    is_default: bool
    current_revision: int
    revision: Revision = Field(description="The current revision.")
    build: Build | None = Field(
        description="The build of the current revision's packages; null without packages."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: EnvironmentView) -> Environment:
        return cls(
            id=view.id,
            app_id=view.app_id,
            name=view.name,
            is_default=view.is_default,
            current_revision=view.current_revision,
            revision=Revision.of(view.revision),
            build=Build.of(view.build) if view.build else None,
            created_at=view.created_at,
            updated_at=view.updated_at,
        )


class EnvironmentList(BaseModel):
    environments: list[Environment]


class RevisionList(BaseModel):
    revisions: list[Revision] = Field(description="Newest first.")


# --- configuring agents ------------------------------------------------------------------

RuntimeName = Literal["openai", "claude", "acp"]
ToolName = Literal["bash", "read", "write", "edit", "glob", "grep", "web_fetch"]
# Spelled out for the type checker; kept equal to the catalog here, at import.
assert set(get_args(RuntimeName)) == set(RUNTIMES), "RuntimeName and agents.RUNTIMES differ"
assert set(get_args(ToolName)) == set(BUILTIN_TOOLS), "ToolName and agents.BUILTIN_TOOLS differ"
ResourceId = Annotated[str, Field(pattern=r"^[A-Za-z0-9]{0,26}$")]
BoundId = Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,26}$")]


class ProviderOptions(_Request):
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)

    @field_validator("temperature", "max_tokens", mode="before")
    @classmethod
    def _a_json_number(cls, value: Any) -> Any:
        # JSON numbers only (2.0 is an integer too, as JSON Schema says): not a boolean, not
        # a numeric string, which pydantic would otherwise take.
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError("must be a number")
        return value

    reasoning_effort: Literal["none", "low", "medium", "high"] | None = None


class AgentProfile(_Request):
    """The fields of the console's Preview form; each is validated by the same service."""

    name: Name | None = None
    description: Text | None = Field(default=None, max_length=500)
    runtime: RuntimeName | None = None
    kind: Literal["pet", "cattle"] | None = None
    model: Text | None = Field(default=None, max_length=200)
    system_prompt: str | None = Field(default=None, max_length=100_000, pattern=r"^[^\x00]*$")
    tools: dict[ToolName, Literal["allow", "ask"]] | None = Field(
        default=None, description="Enabled built-in tools and their policy; absent ones are off."
    )
    provider_options: ProviderOptions | None = Field(
        default=None, description="null removes them all; an option set to null is removed."
    )
    environment_id: ResourceId | None = Field(
        default=None, description="Empty string or null: the App's default environment."
    )
    provider_credential_id: ResourceId | None = None
    mcp_servers: list[BoundId] | None = Field(
        default=None,
        max_length=MAX_BINDINGS,
        description="Replaces the bound MCP server ids (null: none). A server bound twice keeps "
        "its first place; a missing or disabled one is a readiness blocker.",
    )
    mcp_policies: dict[str, McpServerPolicy] | None = Field(
        default=None,
        max_length=MAX_BINDINGS,
        description="Per bound server id: `default` policy for its tools (`off`, `allow`, "
        "`ask`), per-tool overrides, `required`. Replaces them all; entries of servers not bound "
        "are dropped; a bound server without one asks for every tool.",
    )
    skills: list[SkillBindingText] | None = Field(
        default=None,
        max_length=MAX_SKILL_BINDINGS,
        description="Replaces the bound skills: each `<skill id>` (follows the latest version) "
        "or `<skill id>@<version>` (pinned). A skill bound twice keeps its first binding; one "
        "that does not exist is accepted and reported by readiness (`skill_missing`).",
    )

    def changes(self) -> AgentChanges:
        """The fields given; null clears only where clearing means something (the key, the
        options, the environment) and is ignored for the others."""
        given = self.model_dump(exclude_unset=True, exclude={"app_id"})
        if self.provider_options is not None:
            given["provider_options"] = self.provider_options.model_dump(exclude_unset=True)
        return AgentChanges(
            **{key: value for key, value in given.items() if value is not None or key in _CLEARABLE}
        )


_CLEARABLE = frozenset(
    {"provider_credential_id", "provider_options", "environment_id", "mcp_servers", "mcp_policies"}
)


class CreateAgent(AgentProfile):
    app_id: Text | None = Field(
        default=None, max_length=26, description="The App; the account's first App if left out."
    )
    name: Name


class ReadinessItem(BaseModel):
    code: str
    message: str
    field: str = Field(description="The profile field that fixes it.")


class AgentReadiness(BaseModel):
    ready: bool
    blockers: list[ReadinessItem] = Field(description="What stops the agent from running.")
    warnings: list[ReadinessItem] = Field(description="What it runs without.")

    @classmethod
    def of(cls, readiness: Readiness) -> AgentReadiness:
        return cls(
            ready=readiness.ready,
            blockers=[
                ReadinessItem(code=b.code, message=b.message, field=b.field)
                for b in readiness.blockers
            ],
            warnings=[
                ReadinessItem(code=w.code, message=w.message, field=w.field)
                for w in readiness.warnings
            ],
        )


class PublishAgent(_Request):
    summary: Text = Field(default="", max_length=200, description="What changed in this version.")


class Version(BaseModel):
    id: str
    agent_id: str
    number: int
    summary: str
    created_at: datetime

    @classmethod
    def of(cls, view: VersionView) -> Version:
        return cls(
            id=view.id,
            agent_id=view.agent_id,
            number=view.number,
            summary=view.summary,
            created_at=view.created_at,
        )
