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
    # Whether a key of another provider cannot work at all (the readiness check refuses it):
    # Claude Code speaks only Anthropic's Messages API.
    providers_only: bool = False


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
                "resume",
            }
        ),
        implemented=True,
        providers_only=True,
    ),
    # OpenCode by default (driver/backends/acp.py; another ACP agent by the `acp_command`
    # provider option). It reaches models through OpenAI-compatible providers only: the one
    # provider SDK OpenCode bundles that needs no download.
    "acp": Runtime(
        name="acp",
        label="ACP agent (OpenCode)",
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
        providers_only=True,
    ),
}
