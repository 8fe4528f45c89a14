"""Request and response shapes of environments and of configuring agents from code."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, Field

from mosoo_core.agents import AgentChanges, Readiness
from mosoo_core.agents.versions import VersionView
from mosoo_core.changes import UNSET
from mosoo_core.environments import (
    EnvironmentChanges,
    EnvironmentView,
    RevisionView,
    VariableInput,
)
from mosoo_web.api.v1.schemas import Text, _Request

EnvironmentId = Annotated[str, Path(pattern=r"^[^\x00]*$", description="An environment id.")]
Line = Annotated[str, Field(max_length=300, pattern=r"^[^\x00]*$")]
NetworkPolicy = Literal["none", "limited", "full"]


class VariableIn(_Request):
    name: Text = Field(max_length=128)
    value: str | None = Field(
        default=None,
        max_length=32 * 1024,
        pattern=r"^[^\x00]*$",
        description="Write-only for secrets: leave it out (or null) to keep the stored value "
        "of a secret of the same name.",
    )
    secret: bool = Field(
        default=False,
        description="Stored sealed, never shown again: answers show `••••••••`.",
    )
    setup_only: bool = Field(
        default=False,
        description="Present while the setup script runs, absent from the agent's processes.",
    )


class EnvironmentContent(_Request):
    """The content of a revision; in PATCH, a field left out keeps the current value."""

    pip: list[Line] | None = Field(
        default=None,
        max_length=100,
        description="`name==version` entries. Refused for now: package builds are not "
        "available yet.",
    )
    npm: list[Line] | None = Field(
        default=None,
        max_length=100,
        description="`name@version` entries. Refused for now, like `pip`.",
    )
    setup_script: str | None = Field(
        default=None,
        max_length=64 * 1024,
        pattern=r"^[^\x00]*$",
        description="Runs as the sandbox user in each new sandbox before the agent starts.",
    )
    variables: list[VariableIn] | None = Field(default=None, max_length=100)
    network_policy: NetworkPolicy | None = Field(
        default=None,
        description="`none`: no network. `limited`: HTTP(S) only to `allowed_hosts`, "
        "through Mosoo's egress proxy. `full`: the internet.",
    )
    allowed_hosts: list[Line] | None = Field(
        default=None,
        max_length=100,
        description="For `limited`: exact hosts or `*.suffix`, optionally `:port` (80 and 443 "
        "otherwise). IP addresses are refused.",
    )
    allow_package_indexes: bool | None = Field(
        default=None, description="For `limited`: also allow the configured package indexes."
    )

    def changes(self) -> EnvironmentChanges:
        given = self.model_dump(exclude_unset=True, exclude={"name", "app_id"})
        values: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        if self.variables is not None:
            values["variables"] = [
                VariableInput(v.name, v.value, secret=v.secret, setup_only=v.setup_only)
                for v in self.variables
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
    name: Text = Field(min_length=1, max_length=80)


class UpdateEnvironment(EnvironmentContent):
    name: Text | None = Field(default=None, min_length=1, max_length=80, description="Renames.")


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


class Environment(BaseModel):
    id: str
    app_id: str
    name: str
    is_default: bool
    current_revision: int
    revision: Revision = Field(description="The current revision.")
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
            created_at=view.created_at,
            updated_at=view.updated_at,
        )


class EnvironmentList(BaseModel):
    environments: list[Environment]


class RevisionList(BaseModel):
    revisions: list[Revision] = Field(description="Newest first.")


# --- configuring agents ------------------------------------------------------------------


class AgentProfile(_Request):
    """The fields of the console's Preview form; each is validated by the same service."""

    name: Text | None = Field(default=None, min_length=1, max_length=80)
    description: Text | None = Field(default=None, max_length=500)
    runtime: Text | None = Field(default=None, max_length=32)
    kind: Literal["pet", "cattle"] | None = None
    provider_credential_id: Text | None = Field(default=None, max_length=26)
    model: Text | None = Field(default=None, max_length=200)
    system_prompt: str | None = Field(default=None, max_length=100_000, pattern=r"^[^\x00]*$")
    tools: dict[Text, Literal["allow", "ask"]] | None = Field(
        default=None, description="Enabled built-in tools and their policy; absent ones are off."
    )
    provider_options: dict[Text, Any] | None = None
    environment_id: Text | None = Field(
        default=None, max_length=26, description="Empty string: the App's default environment."
    )

    def changes(self) -> AgentChanges:
        """The fields given; null clears only where clearing means something (the key, the
        options, the environment) and is ignored for the others."""
        given = self.model_dump(exclude_unset=True, exclude={"app_id"})
        return AgentChanges(
            **{key: value for key, value in given.items() if value is not None or key in _CLEARABLE}
        )


_CLEARABLE = frozenset({"provider_credential_id", "provider_options", "environment_id"})


class CreateAgent(AgentProfile):
    app_id: Text | None = Field(
        default=None, max_length=26, description="The App; the account's first App if left out."
    )
    name: Text = Field(min_length=1, max_length=80)


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
