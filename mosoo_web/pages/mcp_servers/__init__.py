"""The MCP servers pages.

- `list.py`: `/apps/[app_id]/mcp`, the App's MCP servers (`McpServersState`)
- `editor_state.py`: `McpServerEditorState`, one server's form, Test connection, OAuth
- `editor.py`: `/apps/[app_id]/mcp/[server_id]`, the editor and its tool browser
- `services.py`: the `mosoo_core.mcp` calls the states make, and their rows
"""

from mosoo_web.pages.mcp_servers.editor import mcp_server_page
from mosoo_web.pages.mcp_servers.editor_state import McpServerEditorState
from mosoo_web.pages.mcp_servers.list import McpServersState, mcp_servers_page

__all__ = ["McpServerEditorState", "McpServersState", "mcp_server_page", "mcp_servers_page"]
