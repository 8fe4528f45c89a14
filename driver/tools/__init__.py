"""Built-in tools the driver runs itself: bash, read, write, edit, glob, grep, web_fetch.

Each has a JSON schema for the model and `run(arguments, context) -> ToolResult(output,
is_error)`, which turns every failure into an error result (only cancellation escapes).
"""

from __future__ import annotations

from driver.tools.base import MAX_TOOL_OUTPUT_CHARS, Tool, ToolContext, ToolResult
from driver.tools.bash import BashTool
from driver.tools.files import EditTool, ReadTool, WriteTool
from driver.tools.search import GlobTool, GrepTool
from driver.tools.web_fetch import WebFetchTool


def builtin_tools() -> dict[str, Tool]:
    """A fresh instance of every built-in tool, by name."""
    tools: list[Tool] = [
        BashTool(),
        ReadTool(),
        WriteTool(),
        EditTool(),
        GlobTool(),
        GrepTool(),
        WebFetchTool(),
    ]
    return {tool.name: tool for tool in tools}


__all__ = ["MAX_TOOL_OUTPUT_CHARS", "Tool", "ToolContext", "ToolResult", "builtin_tools"]
