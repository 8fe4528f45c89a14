"""MCP servers: remote tools over Streamable HTTP, per App, with write-only credentials in
the vault (bearer, custom headers, OAuth 2.1), Test connection and its tool browser, and the
per-run grants a sandbox presents to control's MCP proxy instead of any credential."""

from mosoo_core.mcp._grants import McpGrantContext, issue_grant, resolve_grant
from mosoo_core.mcp.connection import (
    McpTestResult,
    Upstream,
    credential_headers,
    test_server,
    upstream,
)
from mosoo_core.mcp.oauth import (
    Completed,
    OAuthUnavailable,
    complete_authorization,
    disconnect,
    start_authorization,
)
from mosoo_core.mcp.service import (
    BoundServer,
    McpServerChanges,
    McpServerView,
    McpToolView,
    OAuthView,
    RunBinding,
    bound_servers,
    create_server,
    delete_server,
    get_server,
    list_servers,
    mcp_server_app_id,
    run_bindings,
    set_enabled,
    update_server,
    usable_servers,
)
from mosoo_core.mcp.validation import (
    DEFAULT_POLICY,
    NAME_PATTERN,
    POLICIES,
    clean_server_policy,
    server_policy,
)

__all__ = [
    "DEFAULT_POLICY",
    "NAME_PATTERN",
    "POLICIES",
    "BoundServer",
    "Completed",
    "McpGrantContext",
    "McpServerChanges",
    "McpServerView",
    "McpTestResult",
    "McpToolView",
    "OAuthUnavailable",
    "OAuthView",
    "RunBinding",
    "Upstream",
    "bound_servers",
    "clean_server_policy",
    "complete_authorization",
    "create_server",
    "credential_headers",
    "delete_server",
    "disconnect",
    "get_server",
    "issue_grant",
    "list_servers",
    "mcp_server_app_id",
    "resolve_grant",
    "run_bindings",
    "server_policy",
    "set_enabled",
    "start_authorization",
    "test_server",
    "update_server",
    "upstream",
    "usable_servers",
]
