"""The fields of the Preview form: their labels, the ids the readiness "Fix" buttons go to,
the fields a refusal can be shown next to, and the values the choice fields take."""

from __future__ import annotations

NO_PROVIDER = "none"  # the provider select's value for "no provider key"
DEFAULT_ENVIRONMENT = "default"  # the environment select's value for "no environment bound"
DEFAULT_EFFORT = "default"  # the select's value for "no reasoning_effort key"
TOOL_POLICIES = ("off", "allow", "ask")
TOOL_DESCRIPTIONS = {
    "bash": "Run shell commands",
    "read": "Read files",
    "write": "Create and overwrite files",
    "edit": "Change parts of files",
    "glob": "Find files by name",
    "grep": "Search inside files",
    "web_fetch": "Fetch web pages through the environment's network policy",
}
FIELD_LABELS = {
    "runtime": "Runtime",
    "provider_credential_id": "Provider key",
    "model": "Model",
    "system_prompt": "System prompt",
    "name": "Name",
    "kind": "Kind",
    "tools": "Tools",
    "description": "Description",
    "provider_options": "Provider options",
    "environment_id": "Environment",
    "skills": "Skills",
    "mcp_servers": "MCP servers",
}
# The keys of `PreviewState.field_errors`, in the order the form header reports them
# ("Not saved: <the first one>"). A refusal for any other field shows next to the name.
ERROR_FIELDS = (
    "name",
    "description",
    "provider_credential_id",
    "model",
    "system_prompt",
    "kind",
    "tools",
    "temperature",
    "max_tokens",
    "reasoning_effort",
    "provider_options",
    "runtime",
    "environment_id",
    "skills",
    "mcp_servers",
)
# The element (id) a readiness blocker's "Fix" button scrolls to and focuses.
FIELD_TARGETS = {name: "field-" + name.replace("_", "-") for name in FIELD_LABELS}
SAVE_DEBOUNCE_MS = 800  # text fields save this long after typing stops (and on blur)
