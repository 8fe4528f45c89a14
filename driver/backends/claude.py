"""The `claude` runtime: Claude Code (the CLI bundled in the Claude Agent SDK's wheel) is the
agent; we drive it with the SDK's `ClaudeSDKClient` and map what it streams onto our events.

One CLI process per run, started for the run and gone after it (about 0.6 s): no Claude Code
process sits in an idle sandbox, and Stop has one process tree to end. The conversation
carries over because each run resumes the thread's Claude Code session (`--resume <id>`):
its transcript lives in the CLI's own config dir, `<workspace>/.mosoo/claude/<session>/`,
beside the session id we keep there (`state.json`), so a Cattle thread restored from its
workspace checkpoint continues, and the threads of a Pet that share a workspace keep
separate conversations and configs.

Model calls go to `ANTHROPIC_BASE_URL`, the in-sandbox forwarder's `/gateway/anthropic`, with
the run's grant as `ANTHROPIC_API_KEY`: control swaps it for the vaulted key. The grant
is no provider key (it is bound to this run and its model), but it can spend the run's
budget, so the agent's Bash commands do not get it in their environment (`CLAUDE_ENV_FILE`
unsets it before each; the CLI's own `CLAUDE_CODE_SUBPROCESS_ENV_SCRUB` would also demand
Claude Code's bubblewrap sandbox, which the Mosoo sandbox replaces; a command that reads the
CLI's /proc environ, same user, still finds it, as ARCHITECTURE.md section 6 allows). Nothing
else leaves: non-essential traffic, telemetry, error reports, the autoupdater and the
WebFetch domain preflight are off, and no filesystem settings are read
(`setting_sources=[]`), so a settings file the agent writes cannot loosen its permissions.

Permissions: the Agent's policy per Mosoo tool maps onto Claude Code's tools
(`CLAUDE_TOOLS`): an off tool is not offered, an Allow one is an allow rule, an Ask one an ask
rule, which makes the CLI ask even for a read-only command; the SDK's `can_use_tool` callback
then asks the user through `tool.confirmation.required`. Bound MCP servers are listed first
with our own client (tools, policies, `mcp.server.status`, `mcp_unavailable` for a required
one), then given to the CLI as HTTP servers at control's MCP proxy with their per-run grants;
their tools show as `<server>__<tool>`, as in the `openai` runtime. Bound skills are a local
plugin whose skills/ links to `/opt/mosoo/skills/<name>`, offered as `mosoo:<name>`.

Stop: the SDK's interrupt, then the CLI is closed and every process it started is killed,
found by the marker variable each of them inherits (Claude Code starts each Bash command in
a session of its own, so a process group would not hold them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.backends.base import (
    Backend,
    EventSink,
    RunFailure,
    RunInput,
    import_packages,
    require_packages,
    user_text,
)
from driver.backends.mcp_tools import McpConnections, connect_servers, model_tool_name, policy_for
from driver.protocol import ExecutionSpec, McpBinding
from driver.tools.bash import command_environment

# The SDK (about 30 MB and a second to import, with the MCP server stack it brings) is
# imported at the first run and named where it is used: an idle driver goes without.
if TYPE_CHECKING:
    from claude_agent_sdk import (
        AssistantMessage,
        ClaudeAgentOptions,
        ClaudeSDKClient,
        PermissionResult,
        ResultMessage,
        ToolPermissionContext,
        ToolResultBlock,
    )

log = logging.getLogger("driver.backend.claude")

# What the runtime imports at its first run; checked at start (see require_packages).
PACKAGES = ("claude_agent_sdk",)

# Mosoo's built-in tool -> the Claude Code tools it stands for.
CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "bash": ("Bash",),
    "read": ("Read",),
    "write": ("Write",),
    "edit": ("Edit", "NotebookEdit"),
    "glob": ("Glob",),
    "grep": ("Grep",),
    "web_fetch": ("WebFetch",),
}
STATE_DIR = Path(".mosoo") / "claude"
STATE_VERSION = 1
SKILLS_PLUGIN = "mosoo"  # bound skills are offered as `mosoo:<name>`
# A run's agentic turns (model calls) before it stops with `tool_loop_limit`.
MAX_TURNS = 100
# Environment of the CLI: everything that would phone home is off.
QUIET_ENVIRONMENT = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_FEEDBACK_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
    "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
}
# Variables of the agent's environment that would send the CLI elsewhere than the gateway.
_REDIRECTING_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_USE_", "CLAUDE_CODE_OAUTH")
# Sourced by the CLI before each Bash command: the agent's commands never see the grant.
BASH_ENV_FILE = "unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN CLAUDE_ENV_FILE\n"
# Every process of a run's tree inherits this variable (its value is the run's own token).
TREE_MARKER = "MOSOO_CLAUDE_TREE"
REJECTED_OUTPUT = "rejected by the user"
# Bounds of the way out of a cancelled run (the base waits CANCEL_GRACE_SECONDS in all).
INTERRUPT_SECONDS = 2.0
DRAIN_SECONDS = 3.0
DISCONNECT_SECONDS = 3.0
STOP_SECONDS = 9.0
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
FILE_TOOLS = {"Write": "file_path", "Edit": "file_path", "NotebookEdit": "notebook_path"}


def claude_name(name: str) -> str:
    """How Claude Code spells a server or tool name in `mcp__<server>__<tool>`."""
    return _NAME_CHARS.sub("_", name)


@dataclass
class _McpTool:
    shown_name: str  # `<server>__<tool>`, as the openai runtime calls it
    policy: str


@dataclass
class _StartedTool:
    name: str
    arguments: Any
    started: float
    existed: bool | None = None  # for file tools: whether the file was there before
    done: bool = False


@dataclass
class _Turn:
    """What one run has streamed so far."""

    run_id: str
    message_id: str | None = None  # our id of the text message being streamed
    text_parts: list[str] = field(default_factory=list)
    streamed_api_messages: set[str] = field(default_factory=set)
    api_message_id: str | None = None
    tools: dict[str, _StartedTool] = field(default_factory=dict)
    result: ResultMessage | None = None
    last_text: str = ""


class ClaudeBackend(Backend):
    runtime = "claude"
    capabilities = (
        "text_stream",
        "thinking_stream",
        "tool_stream",
        "permission_requests",
        "cancel",
        "usage",
        "resume",
        "skills",
        "mcp",
    )

    def __init__(
        self,
        spec: ExecutionSpec,
        sink: EventSink,
        *,
        model_base_url: str,
        mcp_base_url: str,
        cli_path: str | None = None,
    ) -> None:
        super().__init__(spec, sink)
        self.model_base_url = model_base_url  # the forwarder's .../gateway/anthropic
        self.mcp_base_url = mcp_base_url  # the forwarder's .../gateway/mcp
        self.cli_path = cli_path
        safe_id = "".join(ch for ch in spec.session_id if ch.isalnum() or ch in "-_") or "session"
        self.state_dir = self.workspace / STATE_DIR / safe_id
        self.config_dir = self.state_dir / "config"
        self.plugin_dir = self.state_dir / "plugin"
        self.env_file = self.state_dir / "bash-env.sh"
        self.state_path = self.state_dir / "state.json"
        self.policies: dict[str, str] = {}  # Claude Code tool name -> allow | ask
        for tool, policy in spec.tools.items():
            for name in CLAUDE_TOOLS.get(tool, ()):
                self.policies[name] = str(policy)
        self.mcp_tools: dict[str, _McpTool] = {}  # by Claude Code's name
        self.mcp_servers: dict[str, McpBinding] = {}  # by Claude Code's server name
        self.mcp_off: list[str] = []
        self._mcp_listed = False
        self.claude_session_id: str | None = None
        self._stderr: deque[str] = deque(maxlen=40)
        self._turn: _Turn | None = None  # the active run's stream state

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        require_packages(self.runtime, *PACKAGES)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.env_file.write_text(BASH_ENV_FILE)
        self._link_skills()
        self.claude_session_id = self._load_state()
        log.info(
            "backend_started",
            extra={
                "runtime": self.runtime,
                "model": self.spec.model,
                "tools": sorted(self.policies),
                "resumes": self.claude_session_id is not None,
            },
        )

    def _link_skills(self) -> None:
        """The bound skills as one local plugin: skills/<name> links to the read-only mount."""
        skills = self.plugin_dir / "skills"
        skills.mkdir(parents=True, exist_ok=True)
        manifest = self.plugin_dir / ".claude-plugin" / "plugin.json"
        manifest.parent.mkdir(exist_ok=True)
        manifest.write_text(
            json.dumps(
                {"name": SKILLS_PLUGIN, "version": "1.0.0", "description": "The Agent's skills"}
            )
        )
        bound = {skill.name: Path(skill.path).parent for skill in self.spec.skills}
        for entry in skills.iterdir():
            if entry.name not in bound and (entry.is_symlink() or entry.is_file()):
                entry.unlink()
        for name, folder in bound.items():
            link = skills / name
            if link.is_symlink() and Path(os.readlink(link)) == folder:
                continue
            temporary = skills / f".{name}.{os.getpid()}"
            temporary.unlink(missing_ok=True)
            temporary.symlink_to(folder)
            os.replace(temporary, link)

    # --- state ---------------------------------------------------------------------------

    def _load_state(self) -> str | None:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            log.warning("claude_state_unreadable", extra={"error": str(error)})
            return None
        if not isinstance(data, dict) or data.get("session_id") not in (None, self.spec.session_id):
            log.warning("claude_state_of_another_session")
            return None
        found = data.get("claude_session_id")
        return found if isinstance(found, str) and found else None

    def _save_state(self, claude_session_id: str) -> None:
        if claude_session_id == self.claude_session_id and self.state_path.exists():
            return
        self.claude_session_id = claude_session_id
        data = {
            "version": STATE_VERSION,
            "session_id": self.spec.session_id,
            "claude_session_id": claude_session_id,
        }
        temporary = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        os.replace(temporary, self.state_path)

    # --- MCP -------------------------------------------------------------------------------

    async def _list_mcp(self, run_id: str) -> None:
        """Reach each bound server once (per driver) to learn its tools, so off tools are not
        offered and a required server that is down fails the run before the CLI starts."""
        if self._mcp_listed or not self.spec.mcp_servers:
            return
        connections: McpConnections = await connect_servers(
            self.mcp_base_url, list(self.spec.mcp_servers), set()
        )
        try:
            for server in connections.servers:
                binding = server.binding
                key = claude_name(binding.name)
                while key in self.mcp_servers:
                    key += "_"
                self.mcp_servers[key] = binding
                offered = 0
                for tool in server.tools:
                    remote = str(tool["name"])
                    name = f"mcp__{key}__{claude_name(remote)}"
                    policy = policy_for(binding, remote)
                    if policy == "off":
                        self.mcp_off.append(name)
                        continue
                    offered += 1
                    self.mcp_tools[name] = _McpTool(model_tool_name(binding.name, remote), policy)
                self.emit(
                    run_id,
                    "mcp.server.status",
                    server=binding.name,
                    status="connected",
                    tools=offered,
                    required=binding.required,
                )
        finally:
            await connections.close()
        self._mcp_listed = True
        for binding, reason in connections.failures:
            log.warning("mcp_server_unavailable", extra={"server": binding.name, "reason": reason})
            self.emit(
                run_id,
                "mcp.server.status",
                server=binding.name,
                status="failed",
                reason=reason,
                required=binding.required,
            )
        required = [binding.name for binding, _ in connections.failures if binding.required]
        if required:
            self._mcp_listed = False  # the next run tries again
            self.mcp_servers.clear()
            self.mcp_tools.clear()
            self.mcp_off.clear()
            raise RunFailure(
                "mcp_unavailable",
                f"The required MCP server {', '.join(required)} is unavailable: "
                + "; ".join(reason for b, reason in connections.failures if b.required),
                retryable=True,
            )

    # --- options -----------------------------------------------------------------------------

    def _environment(self, marker: str) -> dict[str, str]:
        agent_environment = {
            key: value
            for key, value in self.spec.environment.items()
            if not key.startswith(_REDIRECTING_PREFIXES)
        }
        env = command_environment(agent_environment)
        # The forwarder is on loopback: a sandbox's egress proxy must not catch it.
        no_proxy = ",".join(
            part for part in (env.get("NO_PROXY", ""), "127.0.0.1,localhost") if part
        )
        env.update(QUIET_ENVIRONMENT)
        env.update(
            {
                "ANTHROPIC_BASE_URL": self.model_base_url,
                "ANTHROPIC_API_KEY": self.spec.gateway.grant,
                "CLAUDE_CONFIG_DIR": str(self.config_dir),
                "CLAUDE_ENV_FILE": str(self.env_file),
                "NO_PROXY": no_proxy,
                "no_proxy": no_proxy,
                TREE_MARKER: marker,
            }
        )
        max_tokens = self.spec.provider_options.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0:
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_tokens)
        return env

    def _settings(self) -> dict[str, Any]:
        allow = sorted(name for name, policy in self.policies.items() if policy == "allow")
        ask = sorted(name for name, policy in self.policies.items() if policy == "ask")
        allow += sorted(name for name, tool in self.mcp_tools.items() if tool.policy == "allow")
        ask += sorted(name for name, tool in self.mcp_tools.items() if tool.policy == "ask")
        if self.spec.skills:
            allow.append("Skill")
        return {
            "permissions": {"allow": allow, "ask": ask, "defaultMode": "default"},
            "skipWebFetchPreflight": True,
        }

    def _options(self, run_id: str, marker: str, resume: str | None) -> ClaudeAgentOptions:
        from claude_agent_sdk import ClaudeAgentOptions

        tools = sorted(self.policies)
        if self.spec.skills:
            tools.append("Skill")
        options = self.spec.provider_options
        effort = options.get("reasoning_effort")
        mcp_servers: dict[str, Any] = {
            key: {
                "type": "http",
                "url": f"{self.mcp_base_url}/{binding.ref}",
                "headers": {"Authorization": f"Bearer {binding.grant}"},
            }
            for key, binding in self.mcp_servers.items()
        }
        prompt = self.spec.system_prompt.strip()
        return ClaudeAgentOptions(
            cwd=str(self.workspace),
            model=self.spec.model,
            system_prompt=(
                {"type": "preset", "preset": "claude_code", "append": prompt}
                if prompt
                else {"type": "preset", "preset": "claude_code"}
            ),
            tools=tools,
            disallowed_tools=list(self.mcp_off),
            permission_mode="default",
            can_use_tool=self._permission_callback(run_id),
            settings=json.dumps(self._settings()),
            setting_sources=[],
            mcp_servers=mcp_servers,
            strict_mcp_config=True,
            skills=[f"{SKILLS_PLUGIN}:{skill.name}" for skill in self.spec.skills],
            plugins=[{"type": "local", "path": str(self.plugin_dir)}] if self.spec.skills else [],
            include_partial_messages=True,
            resume=resume,
            max_turns=MAX_TURNS,
            env=self._environment(marker),
            effort=effort if effort in ("low", "medium", "high") else None,
            thinking={"type": "disabled"} if effort == "none" else None,
            cli_path=self.cli_path,
            stderr=self._on_stderr,
            max_buffer_size=32 * 1024 * 1024,
        )

    def _on_stderr(self, line: str) -> None:
        self._stderr.append(line)
        log.debug("claude_stderr", extra={"line": line[:2000]})

    # --- permissions -------------------------------------------------------------------------

    def _policy(self, name: str) -> str:
        if name in self.mcp_tools:
            return self.mcp_tools[name].policy
        if name in self.mcp_off:
            return "off"
        if name == "Skill" and self.spec.skills:
            return "allow"
        # A tool we did not offer asks, whatever it is (a user can still say no).
        return self.policies.get(name, "ask")

    def _shown_name(self, name: str) -> str:
        tool = self.mcp_tools.get(name)
        return tool.shown_name if tool is not None else name

    def _permission_callback(self, run_id: str) -> Any:
        async def decide(
            name: str, arguments: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

            policy = self._policy(name)
            if policy == "allow":
                return PermissionResultAllow(updated_input=arguments)
            if policy == "off":
                return PermissionResultDeny(message=f"the tool {name} is off for this agent")
            tool_use_id = context.tool_use_id or f"toolu_{uuid.uuid4().hex[:24]}"
            turn = self._turn
            if turn is not None and tool_use_id not in turn.tools:
                # The ask can overtake the assistant message in the SDK: start the card first.
                self._start_tool(turn, tool_use_id, name, arguments)
            try:
                decision = await self.request_permission(
                    run_id, tool_use_id, self._shown_name(name), arguments
                )
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the SDK is closing
                return PermissionResultDeny(message="the run was stopped", interrupt=True)
            if decision == "allow_once":
                return PermissionResultAllow(updated_input=arguments)
            return PermissionResultDeny(message=REJECTED_OUTPUT)

        return decide

    # --- the run -------------------------------------------------------------------------------

    async def execute(self, run: RunInput) -> str:
        if self.spec.gateway.provider != "anthropic":
            raise RunFailure(
                "provider_unsupported",
                "Claude Code speaks Anthropic's Messages API: choose an Anthropic provider key.",
                retryable=False,
            )
        await self._list_mcp(run.run_id)
        marker = uuid.uuid4().hex
        resume = self.claude_session_id
        if resume is not None and not self._transcript_exists(resume):
            log.warning("claude_transcript_missing", extra={"claude_session_id": resume})
            resume = None
        await import_packages("claude_agent_sdk")
        from claude_agent_sdk import ClaudeSDKClient

        turn = _Turn(run.run_id)
        self._turn = turn
        client = ClaudeSDKClient(self._options(run.run_id, marker, resume))
        try:
            text = await self._converse(client, turn, user_text(run))
        except asyncio.CancelledError:
            await _bounded(self._stop(client, turn, marker), STOP_SECONDS)
            raise
        except BaseException:
            await _bounded(self._end_tree(client, marker), DISCONNECT_SECONDS + 1)
            raise
        finally:
            self._turn = None
        # The answer is whole: closing stdin lets the CLI write its transcript and exit.
        await _bounded(client.disconnect(), 15.0)
        return text

    async def _converse(self, client: ClaudeSDKClient, turn: _Turn, prompt: str) -> str:
        from claude_agent_sdk import ClaudeSDKError

        try:
            await client.connect()
            await client.query(prompt)
            async for message in client.receive_response():
                self._on_message(turn, message)
        except ClaudeSDKError as error:
            raise RunFailure(
                "driver_error", f"Claude Code failed: {self._describe(error)}", retryable=True
            ) from None
        if turn.result is None:
            raise RunFailure(
                "driver_error",
                f"Claude Code ended without a result: {self._describe(None)}",
                retryable=True,
            )
        self._check_result(turn.result)
        return turn.result.result if isinstance(turn.result.result, str) else turn.last_text

    async def _stop(self, client: ClaudeSDKClient, turn: _Turn, marker: str) -> None:
        """Stop: Claude Code interrupts its turn (and writes it to the transcript, so the
        thread resumes with it), then the CLI and everything it started go."""
        for request_id, (owner, future) in list(self._permissions.items()):
            if owner == turn.run_id and not future.done():
                future.cancel()  # the callback answers the CLI with a denial
                self._permissions.pop(request_id, None)
        if turn.result is None and _cli_pid(client) is not None:
            try:
                await asyncio.wait_for(client.interrupt(), timeout=INTERRUPT_SECONDS)
                async with asyncio.timeout(DRAIN_SECONDS):
                    async for message in client.receive_response():
                        self._on_message(turn, message)
            except Exception as error:
                log.info("claude_interrupt_incomplete", extra={"error": str(error)[:300]})
        self._close_text(turn, interrupted=True)
        await self._end_tree(client, marker)

    async def _end_tree(self, client: ClaudeSDKClient, marker: str) -> None:
        """Close the CLI and kill whatever it started that still runs."""
        root = _cli_pid(client)
        tree = _descendants(root) if root else set()
        try:
            await asyncio.wait_for(client.disconnect(), timeout=DISCONNECT_SECONDS)
        except Exception as error:
            log.info("claude_disconnect_incomplete", extra={"error": str(error)[:300]})
        killed = await asyncio.to_thread(kill_tree, marker, tree)
        if killed:
            log.info("claude_tree_killed", extra={"processes": killed})

    def _transcript_exists(self, claude_session_id: str) -> bool:
        projects = self.config_dir / "projects"
        return any(projects.glob(f"*/{claude_session_id}.jsonl"))

    def _describe(self, error: BaseException | None) -> str:
        text = f"{type(error).__name__}: {error}" if error is not None else "no result"
        tail = " | ".join(line.strip() for line in list(self._stderr)[-5:] if line.strip())
        described = text + (f" (stderr: {tail})" if tail else "")
        return described.replace(self.spec.gateway.grant, "[grant]")[:1500]

    def _check_result(self, result: ResultMessage) -> None:
        if not result.is_error and result.subtype == "success":
            return
        detail = result.result or "; ".join(result.errors or []) or result.subtype
        if result.subtype == "error_max_turns":
            raise RunFailure(
                "tool_loop_limit",
                f"the agent made {MAX_TURNS} model calls without a final answer",
                retryable=False,
            )
        status = result.api_error_status
        if status is not None or result.subtype == "success":
            retryable = status is None or status == 429 or status >= 500
            where = f" ({status})" if status is not None else ""
            raise RunFailure(
                "model_error", f"the model call failed{where}: {detail}", retryable=retryable
            )
        raise RunFailure("driver_error", f"Claude Code failed: {detail}", retryable=True)

    # --- mapping what Claude Code streams ----------------------------------------------------

    def _on_message(self, turn: _Turn, message: Any) -> None:
        from claude_agent_sdk import (
            AssistantMessage,
            ResultMessage,
            StreamEvent,
            SystemMessage,
            ToolResultBlock,
            UserMessage,
        )

        if isinstance(message, StreamEvent):
            if message.parent_tool_use_id is None:
                self._on_stream_event(turn, message.event)
        elif isinstance(message, AssistantMessage):
            # An error the CLI words as an assistant message is the result's failure, not text.
            if message.parent_tool_use_id is None and message.error is None:
                self._on_assistant(turn, message)
        elif isinstance(message, UserMessage):
            if message.parent_tool_use_id is None and isinstance(message.content, list):
                for block in message.content:
                    if isinstance(block, ToolResultBlock):
                        self._complete_tool(turn, block)
        elif isinstance(message, SystemMessage):
            if message.subtype == "init":
                session_id = message.data.get("session_id")
                if isinstance(session_id, str) and session_id:
                    self._save_state(session_id)
                for server in message.data.get("mcp_servers") or []:
                    if isinstance(server, dict) and server.get("status") != "connected":
                        log.warning(
                            "claude_mcp_server_not_connected",
                            extra={"server": server.get("name"), "status": server.get("status")},
                        )
        elif isinstance(message, ResultMessage):
            turn.result = message
            if message.session_id:
                self._save_state(message.session_id)
            self._close_text(turn, interrupted=message.is_error)
            self._emit_usage(turn, message)

    def _on_stream_event(self, turn: _Turn, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self._close_text(turn, interrupted=True)  # a retried call restarts its message
            message = event.get("message") or {}
            turn.api_message_id = message.get("id") if isinstance(message, dict) else None
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self._on_text(turn, str(delta.get("text") or ""))
            elif delta.get("type") == "thinking_delta" and delta.get("thinking"):
                if turn.api_message_id:
                    turn.streamed_api_messages.add(turn.api_message_id)
                self.emit(turn.run_id, "thought.delta", text=str(delta["thinking"]))
        elif kind == "message_stop":
            self._close_text(turn, interrupted=False)

    def _on_text(self, turn: _Turn, text: str) -> None:
        if not text:
            return
        if turn.message_id is None:
            turn.message_id = f"msg_{uuid.uuid4().hex}"
            self.emit(turn.run_id, "message.started", message_id=turn.message_id)
        if turn.api_message_id:
            turn.streamed_api_messages.add(turn.api_message_id)
        turn.text_parts.append(text)
        self.emit(turn.run_id, "message.delta", message_id=turn.message_id, text=text)

    def _close_text(self, turn: _Turn, *, interrupted: bool) -> None:
        if turn.message_id is None:
            return
        text = "".join(turn.text_parts)
        extra = {"interrupted": True} if interrupted else {}
        self.emit(turn.run_id, "message.completed", message_id=turn.message_id, text=text, **extra)
        if not interrupted:
            turn.last_text = text
        turn.message_id = None
        turn.text_parts = []

    def _on_assistant(self, turn: _Turn, message: AssistantMessage) -> None:
        from claude_agent_sdk import TextBlock, ThinkingBlock, ToolUseBlock

        streamed = message.message_id in turn.streamed_api_messages
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                if block.id not in turn.tools:
                    self._start_tool(turn, block.id, block.name, block.input)
            elif isinstance(block, TextBlock) and not streamed and block.text:
                # Not streamed (no partial events for it): the whole block as one message.
                self._on_text(turn, block.text)
                self._close_text(turn, interrupted=False)
            elif isinstance(block, ThinkingBlock) and not streamed and block.thinking:
                self.emit(turn.run_id, "thought.delta", text=block.thinking)

    def _start_tool(self, turn: _Turn, tool_use_id: str, name: str, arguments: Any) -> None:
        self._close_text(turn, interrupted=False)
        existed: bool | None = None
        path = self._file_path(name, arguments)
        if path is not None:
            existed = path.exists()
        turn.tools[tool_use_id] = _StartedTool(name, arguments, time.monotonic(), existed)
        self.emit(
            turn.run_id,
            "tool.call.started",
            tool_call_id=tool_use_id,
            name=self._shown_name(name),
            input=arguments,
        )

    def _complete_tool(self, turn: _Turn, block: ToolResultBlock) -> None:
        started = turn.tools.get(block.tool_use_id)
        if started is None or started.done:
            return  # a result of a call we never saw start (another agent's)
        started.done = True
        duration_ms = int((time.monotonic() - started.started) * 1000)
        is_error = bool(block.is_error)
        self.emit(
            turn.run_id,
            "tool.call.completed",
            tool_call_id=block.tool_use_id,
            output=_result_text(block.content),
            is_error=is_error,
            duration_ms=duration_ms,
        )
        if not is_error and started.existed is not None:
            path = self._file_path(started.name, started.arguments)
            if path is not None:
                self.emit(
                    turn.run_id,
                    "file.changed",
                    path=self._display(path),
                    change="modified" if started.existed else "created",
                )

    def _file_path(self, name: str, arguments: Any) -> Path | None:
        key = FILE_TOOLS.get(name)
        if (
            key is None
            or not isinstance(arguments, dict)
            or not isinstance(arguments.get(key), str)
        ):
            return None
        path = Path(os.path.expanduser(arguments[key]))
        return Path(os.path.normpath(path if path.is_absolute() else self.workspace / path))

    def _display(self, path: Path) -> str:
        try:
            relative = path.relative_to(self.workspace)
        except ValueError:
            return str(path)
        return str(relative)

    def _emit_usage(self, turn: _Turn, result: ResultMessage) -> None:
        """The run's tokens from the result, one event per model it used."""
        per_model = result.model_usage or {}
        if per_model:
            for model, numbers in per_model.items():
                self.emit(
                    turn.run_id,
                    "usage.updated",
                    **_usage_numbers(
                        numbers.get("inputTokens"),
                        numbers.get("cacheCreationInputTokens"),
                        numbers.get("cacheReadInputTokens"),
                        numbers.get("outputTokens"),
                        numbers.get("thinkingTokens"),
                    ),
                    model=model,
                )
            return
        usage = result.usage or {}
        if usage:
            details = usage.get("output_tokens_details")
            self.emit(
                turn.run_id,
                "usage.updated",
                **_usage_numbers(
                    usage.get("input_tokens"),
                    usage.get("cache_creation_input_tokens"),
                    usage.get("cache_read_input_tokens"),
                    usage.get("output_tokens"),
                    details.get("thinking_tokens") if isinstance(details, dict) else None,
                ),
                model=self.spec.model,
            )


# --- helpers ---------------------------------------------------------------------------------


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage_numbers(
    uncached: Any, created: Any, read: Any, output: Any, thinking: Any
) -> dict[str, int]:
    """Counted the OpenAI way, as the ledger does: the input is the whole prompt, of which
    `cached_input_tokens` came from the cache (Anthropic reports the three parts apart)."""
    numbers = {
        "input_tokens": _int(uncached) + _int(created) + _int(read),
        "output_tokens": _int(output),
        "cached_input_tokens": _int(read),
        "cache_creation_input_tokens": _int(created),
    }
    if _int(thinking):
        numbers["reasoning_tokens"] = _int(thinking)
    return numbers


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                parts.append(str(item.get("text", "")))
            else:
                parts.append(f"[{item.get('type', 'content')}]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def _cli_pid(client: ClaudeSDKClient) -> int | None:
    transport = getattr(client, "_transport", None)
    process = getattr(transport, "_process", None)
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


def _processes() -> dict[int, int]:
    """pid -> parent pid, from /proc."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (in parentheses) may hold spaces: the fields follow its last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            found[int(entry.name)] = int(fields[1])
    return found


def _descendants(root: int) -> set[int]:
    parents = _processes()
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree


def _marked(marker: str) -> set[int]:
    """The processes whose environment carries the run's marker."""
    needle = f"{TREE_MARKER}={marker}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.add(int(entry.name))
    return found


async def _bounded(work: Any, seconds: float) -> None:
    """Run `work` to its end in a task of its own, waiting at most `seconds`: a second cancel
    of the caller does not cut a clean-up short."""
    task = asyncio.ensure_future(work)
    with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
        await asyncio.wait_for(asyncio.shield(task), timeout=seconds)


def kill_tree(marker: str, known: set[int] | frozenset[int] = frozenset()) -> int:
    """SIGKILL every process of a run's tree (its marker, or `known` still alive and under
    it), a few rounds so a child forked meanwhile goes too; returns how many were killed."""
    me = os.getpid()
    killed: set[int] = set()
    for _ in range(5):
        alive = _processes()
        targets = {pid for pid in _marked(marker) | (known & set(alive)) if pid != me}
        for pid in list(targets):
            targets |= _descendants(pid) - {me}
        targets -= killed
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= targets
        time.sleep(0.05)
    return len(killed)
