"""Runtimes Mosoo knows, what each can do, and which the driver implements today."""

from __future__ import annotations

from dataclasses import dataclass, field

from driver.protocol import CAPABILITIES

BUILTIN_TOOLS = ("bash", "read", "write", "edit", "glob", "grep", "web_fetch")
TOOL_POLICIES = ("allow", "ask")

# Every runtime has every capability of the driver protocol's vocabulary today; each
# backend reports its own set in `hello`, and a test checks the two agree.
_ALL_CAPABILITIES = CAPABILITIES
# Mosoo's built-in tool -> what the runtime's agent calls the tools (or, for OpenCode, the
# permissions) a policy governs. The driver keeps the same tables (claude.CLAUDE_TOOLS,
# opencode.TOOL_PERMISSIONS); mosoo_core may not import the driver's backends, so a test
# checks the copies agree.
_CLAUDE_TOOL_NAMES = {
    "bash": ("Bash",),
    "read": ("Read",),
    "write": ("Write",),
    "edit": ("Edit", "NotebookEdit"),
    "glob": ("Glob",),
    "grep": ("Grep",),
    "web_fetch": ("WebFetch",),
}
_OPENCODE_TOOL_NAMES = {
    "bash": ("bash",),
    "read": ("read", "list"),
    "write": ("edit",),
    "edit": ("edit",),
    "glob": ("glob",),
    "grep": ("grep",),
    "web_fetch": ("webfetch",),
}


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
    # Mosoo's tool -> the runtime agent's own names for it; a tool not listed keeps its name.
    tool_names: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def tool_label(self, tool: str) -> str:
        """How the runtime's agent names a built-in tool, e.g. "Edit, NotebookEdit"."""
        return ", ".join(self.tool_names.get(tool, (tool,)))


RUNTIMES: dict[str, Runtime] = {
    "openai": Runtime(
        name="openai",
        label="OpenAI-compatible tool loop",
        providers=("openai", "deepseek", "openrouter", "ollama", "openai_compatible"),
        capabilities=_ALL_CAPABILITIES,
        implemented=True,
    ),
    "claude": Runtime(
        name="claude",
        label="Claude Agent SDK",
        providers=("anthropic",),
        capabilities=_ALL_CAPABILITIES,
        implemented=True,
        providers_only=True,
        tool_names=_CLAUDE_TOOL_NAMES,
    ),
    # OpenCode by default (driver/backends/acp.py; another ACP agent by the `acp_command`
    # provider option). It reaches models through OpenAI-compatible providers only: the one
    # provider SDK OpenCode bundles that needs no download.
    "acp": Runtime(
        name="acp",
        label="ACP agent (OpenCode)",
        providers=("openai", "deepseek", "openrouter", "ollama", "openai_compatible"),
        capabilities=_ALL_CAPABILITIES,
        implemented=True,
        providers_only=True,
        tool_names=_OPENCODE_TOOL_NAMES,
    ),
}
