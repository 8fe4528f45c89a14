"""Agents: profile, runtime catalog, readiness, published versions."""

from mosoo_core.agents._catalog import BUILTIN_TOOLS, RUNTIMES, Runtime
from mosoo_core.agents.packages import ImportReport, export_agent, import_agent
from mosoo_core.agents.service import (
    DEFAULT_TOOLS,
    AgentView,
    Blocker,
    DeletedAgent,
    Readiness,
    agent_view,
    count_threads,
    create_agent,
    delete_agent,
    fork_agent,
    get_agent,
    list_agents,
    owned_agent,
    readiness,
    update_agent,
)
from mosoo_core.agents.versions import (
    VersionView,
    get_version,
    list_versions,
    publish_agent,
    thread_profile,
    unpublish_agent,
)

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_TOOLS",
    "RUNTIMES",
    "AgentView",
    "Blocker",
    "DeletedAgent",
    "ImportReport",
    "Readiness",
    "Runtime",
    "VersionView",
    "agent_view",
    "count_threads",
    "create_agent",
    "delete_agent",
    "export_agent",
    "fork_agent",
    "get_agent",
    "get_version",
    "import_agent",
    "list_agents",
    "list_versions",
    "owned_agent",
    "publish_agent",
    "readiness",
    "thread_profile",
    "unpublish_agent",
    "update_agent",
]
