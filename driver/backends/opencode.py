"""OpenCode as the `acp` runtime's agent: its per-run configuration and environment.

OpenCode reads one config file (`OPENCODE_CONFIG`) that we render for each driver:

- one provider, `mosoo`, on the bundled `@ai-sdk/openai-compatible` SDK (the only one that
  needs no download), whose baseURL is the in-sandbox forwarder's `.../gateway/openai/v1`
  and whose apiKey is the run's grant. The file says `{env:MOSOO_ACP_GATEWAY_GRANT}` and the
  grant travels in the agent's environment, so no grant is written into the workspace (which
  is checkpointed);
- the Agent's model declared under a fixed key, `mosoo/selected`, with the model's own id as
  `id`: the model name is passed as it is, never split out of a `provider/model` string;
- autoupdate, sharing and snapshots off, the title and summary agents off (each would be an
  extra model call per run), and `OPENCODE_DISABLE_MODELS_FETCH` and friends in the
  environment, so nothing is fetched at run time (strace of a run shows no connection but
  loopback);
- the Agent's tool policies as OpenCode permissions (see `permissions`), its system prompt as
  an instructions file, its bound skills as `skills.paths`.

OpenCode's config, data, cache and state directories are XDG directories under the run's
state (`<workspace>/.mosoo/acp/<session>/`), never the read-only root. OpenCode installs
`@opencode-ai/plugin` into each config directory at start unless that directory already has a
`node_modules` and a lock file listing it (checked in OpenCode 1.18's `Npm.install`): we write
that empty install, so it never runs npm (it would reach for the registry).

Usage: OpenCode answers a prompt with its last model call's tokens only (its assistant
message per model call keeps its own), so `prompt_usage` sums the prompt's calls from
OpenCode's own session database, under the same XDG data directory.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from driver.protocol import ExecutionSpec, McpBinding

PROVIDER_ID = "mosoo"
MODEL_KEY = "selected"
GRANT_ENV = "MOSOO_ACP_GATEWAY_GRANT"
# The version OpenCode asks for in its config directories (the image's OpenCode version).
PLUGIN_PACKAGE = "@opencode-ai/plugin"
PLUGIN_VERSION = "1.18.33"
# Mosoo's built-in tools -> the OpenCode permissions that govern them. OpenCode has one
# permission, `edit`, for every file change (write, edit, patch), and `read` also covers `list`.
TOOL_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "bash": ("bash",),
    "read": ("read", "list"),
    "write": ("edit",),
    "edit": ("edit",),
    "glob": ("glob",),
    "grep": ("grep",),
    "web_fetch": ("webfetch",),
}
MCP_POLICIES = {"off": "deny", "allow": "allow", "ask": "ask"}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")

ENVIRONMENT = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    # Neither is of use over ACP; without them OpenCode is ready about 0.5 s sooner.
    "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1",
    "OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
}


def is_opencode(command: list[str]) -> bool:
    return Path(command[0]).name == "opencode"


def mcp_tool_prefix(server: str) -> str:
    """How OpenCode names a server's tools: `<server>_<tool>`, the name's odd characters as `_`."""
    return _NAME_CHARS.sub("_", server) + "_"


def permissions(spec: ExecutionSpec) -> dict[str, Any]:
    """OpenCode permissions from the Agent's policies. Later rules win in OpenCode, so the
    catch-all `*: deny` (a tool the Agent did not turn on is not offered) comes first.

    A permission several Mosoo tools share (`edit` for write and edit) asks when any of them
    asks. Outside the Agent's tools: todo lists are allowed (they stay in OpenCode), `skill`
    when skills are bound, paths outside the workspace (attachments, skills) too, as with the
    built-in tools (the sandbox is the boundary); OpenCode's doom-loop guard asks; subagents,
    web search, LSP and questions stay denied."""
    rules: dict[str, Any] = {"*": "deny", "todowrite": "allow", "todoread": "allow"}
    chosen: dict[str, set[str]] = {}
    for tool, policy in spec.tools.items():
        for permission in TOOL_PERMISSIONS.get(tool, ()):
            chosen.setdefault(permission, set()).add(policy)
    for permission, policies in sorted(chosen.items()):
        rules[permission] = "ask" if "ask" in policies else "allow"
    if spec.skills:
        rules["skill"] = "allow"
    rules["external_directory"] = "allow"
    rules["doom_loop"] = "ask"
    for binding in spec.mcp_servers:
        rules.update(_mcp_permissions(binding))
    return rules


def _mcp_permissions(binding: McpBinding) -> dict[str, str]:
    prefix = mcp_tool_prefix(binding.name)
    rules = {f"{prefix}*": MCP_POLICIES[binding.default_policy]}
    for tool, policy in sorted(binding.tool_policies.items()):
        rules[prefix + _NAME_CHARS.sub("_", tool)] = MCP_POLICIES[policy]
    return rules


def render_config(
    spec: ExecutionSpec, *, model_base_url: str, instructions: Path | None
) -> dict[str, Any]:
    """The whole OpenCode config of one driver."""
    model: dict[str, Any] = {"id": spec.model, "name": spec.model}
    options = spec.provider_options
    if isinstance(options.get("max_tokens"), int):
        model["limit"] = {"context": 0, "output": options["max_tokens"]}
    if options.get("reasoning_effort"):
        model["options"] = {"reasoningEffort": options["reasoning_effort"]}
    build: dict[str, Any] = {}
    if isinstance(options.get("temperature"), int | float):
        model["temperature"] = True  # the model takes one: OpenCode sends it only then
        build["temperature"] = options["temperature"]
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
        "enabled_providers": [PROVIDER_ID],
        "model": f"{PROVIDER_ID}/{MODEL_KEY}",
        "small_model": f"{PROVIDER_ID}/{MODEL_KEY}",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mosoo",
                "options": {"baseURL": model_base_url, "apiKey": f"{{env:{GRANT_ENV}}}"},
                "models": {MODEL_KEY: model},
            }
        },
        "permission": permissions(spec),
        "agent": {
            "title": {"disable": True},
            "summary": {"disable": True},
            **({"build": build} if build else {}),
        },
    }
    if instructions is not None:
        config["instructions"] = [str(instructions)]
    if spec.skills:
        config["skills"] = {"paths": sorted({str(Path(s.path).parent) for s in spec.skills})}
    return config


def prepare_home(state: Path, config: dict[str, Any], system_prompt: str) -> dict[str, str]:
    """Write the config (and the instructions it names) under `state` and make OpenCode's
    directories; returns the environment that points OpenCode at them."""
    environment = xdg_environment(state)
    config_dir = state / "xdg" / "config" / "opencode"
    _write_plugin_install(config_dir)
    if system_prompt.strip():
        (state / "instructions.md").write_text(system_prompt.strip() + "\n", encoding="utf-8")
    path = state / "opencode.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return {**environment, **ENVIRONMENT, "OPENCODE_CONFIG": str(path)}


def xdg_environment(state: Path) -> dict[str, str]:
    """XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME and XDG_STATE_HOME under `state/xdg`,
    made if missing: where an agent keeps its own files (and OpenCode its sessions)."""
    environment = {}
    for name in ("config", "data", "cache", "state"):
        directory = state / "xdg" / name
        directory.mkdir(parents=True, exist_ok=True)
        environment[f"XDG_{name.upper()}_HOME"] = str(directory)
    return environment


def _write_plugin_install(config_dir: Path) -> None:
    """An empty but complete-looking install of OpenCode's plugin package (see the module
    docstring): OpenCode then sees nothing to install."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "node_modules").mkdir(exist_ok=True)
    dependencies = {PLUGIN_PACKAGE: PLUGIN_VERSION}
    (config_dir / "package.json").write_text(json.dumps({"dependencies": dependencies}))
    lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": dependencies}}}
    (config_dir / "package-lock.json").write_text(json.dumps(lock))
    gitignore = config_dir / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text(
            "node_modules\npackage.json\npackage-lock.json\nbun.lock\n.gitignore\n"
        )


def prompt_usage(state: Path, session_id: str, since_ms: int) -> dict[str, int] | None:
    """The tokens of every model call OpenCode made for one prompt: the sum over the session's
    assistant messages (OpenCode keeps one per model call, with that call's tokens) created
    since `since_ms`, read from its database under `state`'s XDG data directory. None when
    there is none to read (no database, another layout, no call), so the caller falls back to
    what the prompt's answer reported."""
    data_dir = state / "xdg" / "data" / "opencode"
    totals = {"input": 0, "output": 0, "reasoning": 0, "read": 0, "write": 0}
    calls = 0
    for path in sorted(data_dir.glob("opencode*.db")):
        try:
            with contextlib.closing(
                sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=2)
            ) as db:
                rows = db.execute(
                    "SELECT data FROM message WHERE session_id = ? AND time_created >= ?",
                    (session_id, since_ms),
                ).fetchall()
        except sqlite3.Error:
            continue
        for (raw,) in rows:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            tokens = message.get("tokens")
            if not isinstance(tokens, dict):
                continue
            cache = tokens.get("cache")
            if not isinstance(cache, dict):
                cache = {}
            calls += 1
            for key, value in (
                ("input", tokens.get("input")),
                ("output", tokens.get("output")),
                ("reasoning", tokens.get("reasoning")),
                ("read", cache.get("read")),
                ("write", cache.get("write")),
            ):
                if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                    totals[key] += int(value)
    return totals if calls else None
