"""Runtimes Mosoo knows, what each can do, and which the driver implements today."""

from __future__ import annotations

from dataclasses import dataclass

BUILTIN_TOOLS = ("bash", "read", "write", "edit", "glob", "grep", "web_fetch")
TOOL_POLICIES = ("allow", "ask")


@dataclass(frozen=True)
class Runtime:
    name: str
    label: str
    providers: tuple[str, ...]
    capabilities: frozenset[str]
    implemented: bool


RUNTIMES: dict[str, Runtime] = {
    "openai": Runtime(
        name="openai",
        label="OpenAI-compatible tool loop",
        providers=("openai", "deepseek", "openrouter", "ollama", "openai_compatible"),
        capabilities=frozenset(
            {
                "text_stream",
                "thinking_stream",
                "tool_stream",
                "permission_requests",
                "cancel",
                "usage",
                "resume",
            }
        ),
        implemented=True,
    ),
    "claude": Runtime(
        name="claude",
        label="Claude Agent SDK",
        providers=("anthropic",),
        capabilities=frozenset(
            {
                "text_stream",
                "thinking_stream",
                "tool_stream",
                "permission_requests",
                "cancel",
                "usage",
            }
        ),
        implemented=False,
    ),
    "acp": Runtime(
        name="acp",
        label="ACP agent (OpenCode)",
        providers=("openai", "anthropic", "openrouter", "openai_compatible"),
        capabilities=frozenset({"text_stream", "tool_stream", "permission_requests", "cancel"}),
        implemented=False,
    ),
}
