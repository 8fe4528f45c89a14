"""Preview's tool policy rows name each built-in tool as the runtime's own agent does."""

from __future__ import annotations

from mosoo_core.agents import BUILTIN_TOOLS
from mosoo_web.pages.preview.services import tool_labels


def test_each_runtime_shows_its_agents_own_tool_names() -> None:
    claude = tool_labels("claude")
    assert claude["bash"] == "Bash" and claude["edit"] == "Edit, NotebookEdit"
    assert claude["web_fetch"] == "WebFetch"
    opencode = tool_labels("acp")
    assert opencode["web_fetch"] == "webfetch" and opencode["read"] == "read, list"
    # The openai runtime's tools are Mosoo's own; so are an unknown runtime's.
    assert tool_labels("openai") == {tool: tool for tool in BUILTIN_TOOLS}
    assert tool_labels("goose") == {tool: tool for tool in BUILTIN_TOOLS}
    for runtime in ("claude", "acp", "openai"):
        assert list(tool_labels(runtime)) == list(BUILTIN_TOOLS)
