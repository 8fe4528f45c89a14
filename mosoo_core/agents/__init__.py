"""Agents: profile, runtime catalog and readiness."""

from mosoo_core.agents._catalog import BUILTIN_TOOLS, RUNTIMES, Runtime
from mosoo_core.agents.service import (
    DEFAULT_TOOLS,
    AgentView,
    Blocker,
    Readiness,
    agent_view,
    create_agent,
    get_agent,
    list_agents,
    owned_agent,
    readiness,
    update_agent,
)

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_TOOLS",
    "RUNTIMES",
    "AgentView",
    "Blocker",
    "Readiness",
    "Runtime",
    "agent_view",
    "create_agent",
    "get_agent",
    "list_agents",
    "owned_agent",
    "readiness",
    "update_agent",
]
