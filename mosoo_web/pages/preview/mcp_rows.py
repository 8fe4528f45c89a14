"""The Preview's MCP servers picker as plain rows: each bound server with its name (or, gone,
its id), whether it is disabled, its default policy, Required, and a policy per tool of its
last tested tool list; and the pure changes the picker makes to the Agent's `mcp_policies`
(`{server_id: {"default", "tools", "required"}}`, as `mosoo_core.mcp` reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mosoo_core.mcp import POLICIES, server_policy

SERVER_DEFAULT = "default"  # a tool's choice for "no override: the server's default policy"


@dataclass
class McpOption:
    """One of the App's MCP servers, as the picker offers it."""

    id: str = ""
    name: str = ""
    enabled: bool = True
    tools: list[str] = field(default_factory=list)  # from its last Test connection


@dataclass
class McpToolRow:
    name: str = ""
    policy: str = SERVER_DEFAULT  # or an override: off, allow, ask


@dataclass
class McpRow:
    """A bound server as the picker shows it."""

    server_id: str = ""
    label: str = ""  # the server's name; its id when the App has no such server
    missing: bool = False
    disabled: bool = False
    default: str = "ask"
    required: bool = False
    tools: list[McpToolRow] = field(default_factory=list)
    overrides: int = 0  # how many tools have their own policy


def bound_mcp_rows(
    bound: list[str], policies: Mapping[str, Any], options: list[McpOption]
) -> list[McpRow]:
    """The bound servers in binding order, each with its policy; the tools are the server's
    last tested ones, then any override for a tool it no longer lists (so it can be reset)."""
    by_id = {option.id: option for option in options}
    rows: list[McpRow] = []
    for server_id in bound:
        option = by_id.get(server_id)
        policy = server_policy(policies, server_id)
        overrides: dict[str, str] = policy["tools"]
        names = list(option.tools) if option else []
        names += [name for name in overrides if name not in names]
        rows.append(
            McpRow(
                server_id=server_id,
                label=option.name if option else server_id,
                missing=option is None,
                disabled=option is not None and not option.enabled,
                default=policy["default"],
                required=policy["required"],
                tools=[McpToolRow(name, overrides.get(name, SERVER_DEFAULT)) for name in names],
                overrides=len(overrides),
            )
        )
    return rows


def _changed(
    policies: Mapping[str, Any], server_id: str, **values: Any
) -> dict[str, dict[str, Any]]:
    current = server_policy(policies, server_id)
    return {
        **{key: dict(value) for key, value in policies.items() if isinstance(value, Mapping)},
        server_id: {**current, "tools": dict(current["tools"]), **values},
    }


def with_default(
    policies: Mapping[str, Any], server_id: str, value: str
) -> dict[str, dict[str, Any]] | None:
    """The policies with the server's default set; None for a value that is not a policy."""
    return _changed(policies, server_id, default=value) if value in POLICIES else None


def with_tool(
    policies: Mapping[str, Any], server_id: str, tool: str, value: str
) -> dict[str, dict[str, Any]] | None:
    """The policies with one tool's override set (`SERVER_DEFAULT` removes it)."""
    if value != SERVER_DEFAULT and value not in POLICIES:
        return None
    tools = dict(server_policy(policies, server_id)["tools"])
    if value == SERVER_DEFAULT:
        tools.pop(tool, None)
    else:
        tools[tool] = value
    return _changed(policies, server_id, tools=tools)


def with_required(
    policies: Mapping[str, Any], server_id: str, required: bool
) -> dict[str, dict[str, Any]]:
    return _changed(policies, server_id, required=bool(required))


def without(policies: Mapping[str, Any], server_id: str) -> dict[str, dict[str, Any]]:
    """The policies once the server is unbound (the Agent forgets its policy)."""
    return {
        key: dict(value)
        for key, value in policies.items()
        if key != server_id and isinstance(value, Mapping)
    }
