"""The `acp` runtime: an Agent Client Protocol agent driven over its stdio, OpenCode first.

The driver is the ACP client (the `agent-client-protocol` package) and spawns the agent,
`opencode acp` unless the Agent's provider options name another command line
(`"acp_command": ["my-agent", "--acp"]`, see `agent_command`), in its own process group, with
stdin and stdout for ACP and stderr read to its end into the driver's debug log (the last
lines are kept for the error of a run whose agent died). An agent process lives for one run:
it starts while the driver boots (so it is ready when the run's input comes) and is closed,
with its whole process tree, when the run ends. Every run of a thread gets a driver of its
own, in a Pet's shared sandbox too, and the previous one stays connected: an agent kept alive
would idle there and hold the thread's session files the next run's agent needs.

Each run is one `session/prompt`; the agent's `session/update` notifications become our
events: message chunks `message.started/delta/completed`, thought chunks `thought.delta`,
tool calls `tool.call.started` (once the call has its input: in progress, asking, or done)
and `tool.call.completed`, file diffs `file.changed`, and the prompt's usage `usage.updated`:
for OpenCode, the sum over the prompt's model calls from its session database (its answer
reports only the last call's, see `opencode.prompt_usage`); for another agent, what its
answer reports. The gateway's ledger, one record per model call, stays the source of truth.
A `session/request_permission` becomes our permission prompt; Allow once and Reject pick
the agent's `allow_once` / `reject_once` option (never an "always" one). Stop cancels the
run task: we send `session/cancel`, answer a pending permission with `cancelled`, and wait
for the agent to end the prompt; an agent that does not is killed with its process tree.

The ACP session id is kept in `<workspace>/.mosoo/acp/<session_id>/session.json`, next to
the agent's own files (XDG directories: OpenCode's database of sessions lives there), so a
later driver of the same thread, also a fresh Cattle container restored from the workspace
checkpoint, continues it with `session/load` when the agent offers it. An agent that cannot
load sessions gets a new one whose first prompt carries the thread's earlier exchanges (kept
in the same file) as text.

Models: OpenCode gets a rendered config (driver/backends/opencode.py). Another agent gets
the gateway in its environment: `MOSOO_MODEL`, `MOSOO_MODEL_BASE_URL` and
`MOSOO_GATEWAY_GRANT`, plus `OPENAI_BASE_URL` / `OPENAI_API_KEY`, the grant standing in for
the key (the runtime takes OpenAI-compatible keys only), and its own `XDG_*` directories
under the run's state. MCP servers are passed in `session/new` as HTTP servers (control's MCP
proxy through the forwarder, the per-server grant as bearer) when the agent's `initialize`
says it takes them; their tools show as `<server>__<tool>`, as in the `openai` runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from driver import __version__
from driver.backends import opencode
from driver.backends.base import (
    Backend,
    EventSink,
    RunFailure,
    RunInput,
    import_packages,
    require_packages,
    user_text,
)
from driver.backends.mcp_tools import model_tool_name
from driver.protocol import ExecutionSpec
from driver.tools.base import MAX_TOOL_OUTPUT_CHARS
from driver.tools.bash import command_environment

# The ACP library (its schema's models take most of a second to build) is imported when the
# agent starts, in the background after `ready`, and named where it is used.
if TYPE_CHECKING:
    from acp import schema
    from acp.client.connection import ClientSideConnection

log = logging.getLogger("driver.backend.acp")

# What the runtime imports as its agent starts; checked at start (see require_packages).
PACKAGES = ("acp",)

DEFAULT_COMMAND = ("opencode", "acp")
COMMAND_OPTION = "acp_command"
STATE_DIR = Path(".mosoo") / "acp"
STATE_VERSION = 1
CONNECT_TIMEOUT_SECONDS = 120.0
# How long the agent may take to end a prompt after `session/cancel`, and to exit after its
# stdin closed or SIGTERM, before it is killed.
CANCEL_TIMEOUT_SECONDS = 5.0
EXIT_TIMEOUT_SECONDS = 3.0
STDERR_TAIL_LINES = 20
# The earlier exchanges replayed to an agent that cannot load its session.
HISTORY_MAX_EXCHANGES = 20
HISTORY_MAX_CHARS = 40_000
STDIO_LIMIT_BYTES = 50 * 1024 * 1024
INTERRUPTED_OUTPUT = "the tool call was interrupted before it finished"
_STARTED_STATUSES = frozenset({"in_progress", "completed", "failed"})


def agent_command(spec: ExecutionSpec) -> list[str]:
    """The agent's command line: the `acp_command` provider option (a list of strings, the
    program first, found on the sandbox's PATH) or `opencode acp`."""
    value = spec.provider_options.get(COMMAND_OPTION)
    if value is None:
        return list(DEFAULT_COMMAND)
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(part, str) and part for part in value)
    ):
        raise RunFailure(
            "invalid_runtime_options",
            f"{COMMAND_OPTION} must be a non-empty list of strings (the program first)",
        )
    return list(value)


@dataclass
class _ToolCall:
    id: str
    name: str
    input: Any = None
    started_at: float | None = None  # when `tool.call.started` was sent
    done: bool = False


@dataclass
class _Turn:
    """What one prompt has streamed so far."""

    run_id: str
    message_id: str | None = None  # ours, of the open message
    agent_message_id: str | None = None  # the agent's, of the open message
    parts: list[str] = field(default_factory=list)  # the open message's text
    last_text: str = ""  # the last message's whole text: the run's final text
    tools: dict[str, _ToolCall] = field(default_factory=dict)
    permissions: set[asyncio.Future[str]] = field(default_factory=set)


class _AgentProcess:
    """The spawned agent: its process, the ACP connection to it, and its stderr reader."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        connection: ClientSideConnection,
        scratch: Path,
    ) -> None:
        self.process = process
        self.connection = connection
        self.scratch = scratch
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.capabilities: schema.AgentCapabilities | None = None
        self.name = ""
        self.session_id = ""
        self._stderr_task = asyncio.create_task(self._drain_stderr(), name="acp-agent-stderr")

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def _drain_stderr(self) -> None:
        """Read stderr to its end (a full pipe would block the agent), line by line into the
        debug log; read in chunks, so no line is too long."""
        stream = self.process.stderr
        assert stream is not None
        pending = b""
        while chunk := await stream.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > 65536:
                lines.append(pending)
                pending = b""
            for line in lines:
                self._log_stderr(line)
        self._log_stderr(pending)

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace").rstrip()
        if text:
            self.stderr_tail.append(text[:500])
            log.debug("agent_stderr", extra={"line": text[:2000]})

    def describe_exit(self) -> str:
        tail = " | ".join(self.stderr_tail)
        code = self.process.returncode
        what = "the agent is not running" if code is None else f"the agent exited with {code}"
        return f"{what}: {tail[-1500:]}" if tail else what

    async def close(self) -> None:
        """Close stdin (an ACP agent exits on EOF), then SIGTERM, then SIGKILL the whole tree:
        nothing the agent started outlives it."""
        tree = _process_tree(self.process.pid)
        with contextlib.suppress(Exception):
            await self.connection.close()
        if self.process.stdin is not None:
            with contextlib.suppress(Exception):
                self.process.stdin.close()
        if not await self._exited(EXIT_TIMEOUT_SECONDS):
            tree |= _process_tree(self.process.pid)
            _signal_all(self.process.pid, tree, signal.SIGTERM)
            if not await self._exited(EXIT_TIMEOUT_SECONDS):
                _signal_all(self.process.pid, tree, signal.SIGKILL)
                await self._exited(EXIT_TIMEOUT_SECONDS)
        # Children left behind by an agent that did exit (daemonised tools, shells).
        _signal_all(self.process.pid, tree, signal.SIGKILL)
        self._stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._stderr_task
        shutil.rmtree(self.scratch, ignore_errors=True)

    async def _exited(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            return False
        return True


class _Client:
    """The ACP client side the agent calls: updates and permission requests, handed to the
    backend. No file system or terminal methods: the agent uses its own tools."""

    def __init__(self, backend: AcpBackend) -> None:
        self.backend = backend

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.backend._on_update(session_id, update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        options: list[schema.PermissionOption],
        **kwargs: Any,
    ) -> schema.RequestPermissionResponse:
        return await self.backend._on_permission(session_id, tool_call, options)

    def on_connect(self, connection: Any) -> None:
        return None


class AcpBackend(Backend):
    runtime = "acp"
    # Skills and MCP as OpenCode, the default agent, takes them (`skills.paths`; its
    # `initialize` advertises HTTP MCP). The report comes before the agent is started, so an
    # agent named by `acp_command` that takes no HTTP MCP learns it per run instead: its
    # servers show `mcp.server.status` failed, a required one fails the run `mcp_unavailable`.
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
        command: list[str] | None = None,
    ) -> None:
        super().__init__(spec, sink)
        self.model_base_url = model_base_url
        self.mcp_base_url = mcp_base_url.rstrip("/")
        self.command = command
        safe_id = "".join(ch for ch in spec.session_id if ch.isalnum() or ch in "-_") or "session"
        self.state_dir = self.workspace / STATE_DIR / safe_id
        self.agent: _AgentProcess | None = None
        self._connecting: asyncio.Task[_AgentProcess] | None = None
        self._turn: _Turn | None = None
        self._replay: str = ""  # earlier exchanges for the next prompt of a fresh session

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the agent in the background: `ready` goes out at once, the first run
        waits for the agent (and fails with the reason if it could not start)."""
        require_packages(self.runtime, *PACKAGES)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self._connecting = asyncio.create_task(self._connect(), name="acp-agent-start")
        self._connecting.add_done_callback(_retrieve)

    async def close(self) -> None:
        await super().close()
        await self._release_agent()

    async def _release_agent(self) -> None:
        """End the run's agent and its process tree (see the module docstring), also one
        still starting."""
        connecting, self._connecting = self._connecting, None
        if connecting is not None and not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
        agent, self.agent = self.agent, None
        if agent is not None:
            await agent.close()

    async def _ensure_agent(self) -> _AgentProcess:
        """The running agent; one that died since is closed and started again, and so is a
        start that failed before (its error was that run's)."""
        if self.agent is not None:
            if self.agent.alive:
                return self.agent
            log.warning("agent_gone", extra={"reason": self.agent.describe_exit()})
            await self.agent.close()
            self.agent = None
        task = self._connecting
        if task is None or task.done():
            task = self._connecting = asyncio.create_task(self._connect(), name="acp-agent-start")
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _connect(self) -> _AgentProcess:
        """Spawn the agent, `initialize`, then load the thread's session or make one."""
        started = time.monotonic()
        command = self.command or agent_command(self.spec)
        self.command = command
        environment = self._agent_environment(command)
        await import_packages("acp", "acp.schema", "acp.client.connection")
        # The agent's own temporary folder, removed with it. OpenCode (a Bun executable)
        # unpacks a 5.5 MB native library into $TMPDIR each time it starts working and never
        # deletes it: in a sandbox /tmp is a tmpfs counted against its memory, which an
        # Assistant's runs would fill, one copy a run.
        scratch = Path(tempfile.mkdtemp(prefix="mosoo-agent-"))
        environment["TMPDIR"] = str(scratch)
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=str(self.workspace),
                env=environment,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: Stop and close reach its tree
                limit=STDIO_LIMIT_BYTES,
            )
        except BaseException as error:  # not started (also cancelled): nothing else removes it
            shutil.rmtree(scratch, ignore_errors=True)
            if not isinstance(error, OSError):
                raise
            raise RunFailure(
                "agent_unavailable",
                f"could not start the ACP agent {command[0]!r}: {error.strerror or error}",
                retryable=False,
            ) from None
        assert process.stdin is not None and process.stdout is not None
        import acp

        # Only the methods above: the library answers the others (files, terminals) with
        # method-not-found, which is what a client without those capabilities should say.
        client = cast(acp.Client, _Client(self))
        connection = acp.connect_to_agent(client, process.stdin, process.stdout)
        agent = _AgentProcess(process, connection, scratch)
        try:
            await asyncio.wait_for(self._handshake(agent), CONNECT_TIMEOUT_SECONDS)
        except BaseException as error:
            await agent.close()
            if isinstance(error, RunFailure | asyncio.CancelledError):
                raise
            reason = (
                f"no answer in {CONNECT_TIMEOUT_SECONDS:g} s"
                if isinstance(error, TimeoutError)
                else f"{type(error).__name__}: {error}"
            )
            raise RunFailure(
                "agent_unavailable",
                f"the ACP agent {command[0]!r} did not start ({reason}; {agent.describe_exit()})",
                retryable=True,
            ) from None
        self.agent = agent
        log.info(
            "agent_ready",
            extra={
                "agent": agent.name,
                "command": command[0],
                "session": agent.session_id,
                "seconds": round(time.monotonic() - started, 2),
            },
        )
        return agent

    async def _handshake(self, agent: _AgentProcess) -> None:
        import acp
        from acp import schema

        answer = await agent.connection.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(),
            client_info=schema.Implementation(name="mosoo-driver", version=__version__),
        )
        agent.capabilities = answer.agent_capabilities
        agent.name = answer.agent_info.name if answer.agent_info else ""
        servers = self._mcp_servers(agent)
        cwd = str(self.workspace)
        state = self._load_state()
        saved = state.get("acp_session_id")
        can_load = bool(agent.capabilities and agent.capabilities.load_session)
        if isinstance(saved, str) and saved and can_load:
            try:
                # The replayed history arrives as updates while no turn is open: dropped.
                await agent.connection.load_session(cwd=cwd, session_id=saved, mcp_servers=servers)
            except Exception as error:
                log.warning("session_load_failed", extra={"session": saved, "error": str(error)})
            else:
                agent.session_id = saved
                return
        created = await agent.connection.new_session(cwd=cwd, mcp_servers=servers)
        agent.session_id = created.session_id
        self._replay = _replay_text(state.get("history"))
        self._save_state(agent.session_id, state.get("history"))

    def _agent_environment(self, command: list[str]) -> dict[str, str]:
        environment = command_environment(dict(self.spec.environment))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if opencode.is_opencode(command):
            if self.spec.gateway.provider != "openai":
                raise RunFailure(
                    "provider_unsupported",
                    "OpenCode reaches models through an OpenAI-compatible provider; this "
                    f"Agent's key is a {self.spec.gateway.provider} one",
                )
            instructions = self.state_dir / "instructions.md"
            config = opencode.render_config(
                self.spec,
                model_base_url=self.model_base_url,
                instructions=instructions if self.spec.system_prompt.strip() else None,
            )
            environment.update(
                opencode.prepare_home(self.state_dir, config, self.spec.system_prompt)
            )
            environment[opencode.GRANT_ENV] = self.spec.gateway.grant
            return environment
        environment.update(opencode.xdg_environment(self.state_dir))
        grant = self.spec.gateway.grant
        environment.update(
            {
                "MOSOO_MODEL": self.spec.model,
                "MOSOO_MODEL_BASE_URL": self.model_base_url,
                "MOSOO_GATEWAY_GRANT": grant,
            }
        )
        environment.update({"OPENAI_BASE_URL": self.model_base_url, "OPENAI_API_KEY": grant})
        return environment

    def _mcp_servers(self, agent: _AgentProcess) -> list[Any]:
        from acp import schema

        bindings = list(self.spec.mcp_servers)
        if not bindings:
            return []
        if not _takes_http_mcp(agent):
            required = [b.name for b in bindings if b.required]
            if required:
                raise RunFailure(
                    "mcp_unavailable",
                    f"The required MCP server {', '.join(required)} is unavailable: the ACP "
                    "agent does not take MCP servers over HTTP",
                    retryable=False,
                )
            log.warning("agent_without_http_mcp", extra={"servers": [b.name for b in bindings]})
            return []
        return [
            schema.HttpMcpServer(
                type="http",
                name=binding.name,
                url=f"{self.mcp_base_url}/{binding.ref}",
                headers=[schema.HttpHeader(name="Authorization", value=f"Bearer {binding.grant}")],
            )
            for binding in bindings
        ]

    # --- a run ---------------------------------------------------------------------------

    async def execute(self, run: RunInput) -> str:
        from acp import schema

        try:
            agent = await self._ensure_agent()
        except BaseException:  # stopped (or failed) while the agent started: none stays
            await self._release_agent()
            raise
        if self.spec.mcp_servers and not _takes_http_mcp(agent):
            for binding in self.spec.mcp_servers:
                self.emit(
                    run.run_id,
                    "mcp.server.status",
                    server=binding.name,
                    status="failed",
                    reason="the ACP agent does not take MCP servers over HTTP",
                    required=binding.required,
                )
        text = user_text(run)
        prompt_text = f"{self._replay}\n\n{text}" if self._replay else text
        turn = _Turn(run.run_id)
        self._turn = turn
        prompt_started_ms = int(time.time() * 1000)
        prompt = asyncio.create_task(
            agent.connection.prompt(
                session_id=agent.session_id,
                prompt=[schema.TextContentBlock(type="text", text=prompt_text)],
            ),
            name=f"acp-prompt-{run.run_id}",
        )
        try:
            response = await self._wait_prompt(agent, prompt)
        except asyncio.CancelledError:
            await self._cancel_prompt(agent, prompt, turn)
            self._finish_turn(turn, interrupted=True)
            raise
        except BaseException:
            self._finish_turn(turn, interrupted=True)
            raise
        finally:
            self._turn = None
            await self._release_agent()
        self._finish_turn(turn, interrupted=False)
        self._replay = ""
        self._remember(agent.session_id, text, turn.last_text)
        usage = self._prompt_usage(agent, response, prompt_started_ms)
        if usage is not None:
            self.emit(run.run_id, "usage.updated", **usage, model=self.spec.model)
        stop = response.stop_reason
        if stop == "max_turn_requests":
            raise RunFailure(
                "tool_loop_limit", "the agent stopped: too many model calls without an answer"
            )
        if stop == "cancelled":  # not asked by us (that path raised above)
            raise RunFailure("agent_cancelled", "the agent cancelled the run", retryable=True)
        if stop != "end_turn":
            log.warning("prompt_stopped", extra={"run_id": run.run_id, "stop_reason": stop})
        return turn.last_text

    def _prompt_usage(
        self, agent: _AgentProcess, response: Any, started_ms: int
    ) -> dict[str, int] | None:
        """The prompt's tokens, counted as the openai runtime counts them: input_tokens is the
        whole prompt, cached ones included. OpenCode's are summed over the prompt's model calls
        (read once it has exited, so its database is whole); another agent's are what its
        answer reports (ACP's usage is still unstable)."""
        if self.command is not None and opencode.is_opencode(self.command):
            summed = opencode.prompt_usage(self.state_dir, agent.session_id, started_ms)
            if summed is not None:
                numbers = {
                    "input_tokens": summed["input"] + summed["read"] + summed["write"],
                    "output_tokens": summed["output"],
                    "cached_input_tokens": summed["read"],
                }
                if summed["write"]:
                    numbers["cache_creation_input_tokens"] = summed["write"]
                if summed["reasoning"]:
                    numbers["reasoning_tokens"] = summed["reasoning"]
                return numbers
            log.info("opencode_usage_unread", extra={"session": agent.session_id})
        usage = getattr(response, "usage", None)
        if usage is None:
            return None
        cached = usage.cached_read_tokens or 0
        reported = {
            "input_tokens": usage.input_tokens + cached,
            "output_tokens": usage.output_tokens,
        }
        if usage.cached_read_tokens is not None:
            reported["cached_input_tokens"] = usage.cached_read_tokens
        if usage.thought_tokens is not None:
            reported["reasoning_tokens"] = usage.thought_tokens
        return reported

    async def _wait_prompt(self, agent: _AgentProcess, prompt: asyncio.Task[Any]) -> Any:
        """The prompt's answer; an agent error or death fails the run. The prompt task is
        shielded: a cancel of the run reaches the agent as `session/cancel`, not as a
        dropped request."""
        import acp

        try:
            return await asyncio.shield(prompt)
        except acp.RequestError as error:
            raise RunFailure(
                "agent_error", f"the agent refused the prompt: {error}", retryable=False
            ) from None
        except ConnectionError:
            await agent._exited(EXIT_TIMEOUT_SECONDS)
            raise RunFailure("agent_exited", agent.describe_exit(), retryable=True) from None

    async def _cancel_prompt(
        self, agent: _AgentProcess, prompt: asyncio.Task[Any], turn: _Turn
    ) -> None:
        """ACP's cancel: `session/cancel`, every pending permission answered `cancelled`, then
        the agent ends the prompt. One that does not in time is killed with the run."""
        with contextlib.suppress(Exception):
            await agent.connection.cancel(session_id=agent.session_id)
        for future in list(turn.permissions):
            future.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(prompt), CANCEL_TIMEOUT_SECONDS)
        except TimeoutError:
            log.warning("agent_cancel_timeout", extra={"run_id": turn.run_id})
            prompt.cancel()  # the agent goes with the run (`_release_agent`)
        except Exception as error:  # an error answer or a dead agent: the run is over anyway
            log.info("agent_cancel_ended", extra={"run_id": turn.run_id, "error": str(error)})

    # --- updates -------------------------------------------------------------------------

    def _on_update(self, session_id: str, update: Any) -> None:
        """One `session/update`, mapped at once (no await: notifications keep their order)."""
        from acp import schema

        turn = self._turn
        agent = self.agent
        if turn is None or agent is None or session_id != agent.session_id:
            return  # a loaded session's history, or an update after the prompt ended
        if isinstance(update, schema.AgentMessageChunk):
            text = _block_text(update.content)
            if text:
                self._on_text(turn, text, update.message_id)
        elif isinstance(update, schema.AgentThoughtChunk):
            text = _block_text(update.content)
            if text:
                self.emit(turn.run_id, "thought.delta", text=text)
        elif isinstance(update, schema.ToolCallStart | schema.ToolCallProgress):
            self._on_tool_update(turn, update)
        else:
            log.debug("update_ignored", extra={"update": type(update).__name__})

    def _on_text(self, turn: _Turn, text: str, agent_message_id: str | None) -> None:
        if turn.message_id is not None and agent_message_id != turn.agent_message_id:
            self._close_message(turn)
        if turn.message_id is None:
            turn.message_id = f"msg_{uuid.uuid4().hex}"
            turn.agent_message_id = agent_message_id
            self.emit(turn.run_id, "message.started", message_id=turn.message_id)
        turn.parts.append(text)
        self.emit(turn.run_id, "message.delta", message_id=turn.message_id, text=text)

    def _close_message(self, turn: _Turn, *, interrupted: bool = False) -> None:
        if turn.message_id is None:
            return
        text = "".join(turn.parts)
        extra = {"interrupted": True} if interrupted else {}
        self.emit(turn.run_id, "message.completed", message_id=turn.message_id, text=text, **extra)
        turn.last_text = text
        turn.message_id = None
        turn.agent_message_id = None
        turn.parts = []

    def _on_tool_update(
        self, turn: _Turn, update: schema.ToolCallStart | schema.ToolCallProgress
    ) -> None:
        call = turn.tools.get(update.tool_call_id)
        if call is None:
            self._close_message(turn)
            turn.last_text = ""  # text before a tool call is not the final answer
            call = _ToolCall(update.tool_call_id, self._tool_name(update.title or update.kind))
            turn.tools[call.id] = call
        if call.done:
            return
        if update.raw_input:
            call.input = _merged(call.input, update.raw_input)
        if update.status in _STARTED_STATUSES:
            self._start_tool(turn, call)
        if update.status in ("completed", "failed"):
            self._complete_tool(turn, call, update)

    def _tool_name(self, title: str | None) -> str:
        """The agent's name of a tool; an MCP tool as `<server>__<tool>`, as everywhere."""
        name = title or "tool"
        for binding in self.spec.mcp_servers:
            prefix = opencode.mcp_tool_prefix(binding.name)
            if name.startswith(prefix) and len(name) > len(prefix):
                return model_tool_name(binding.name, name[len(prefix) :])
        return name

    def _start_tool(self, turn: _Turn, call: _ToolCall) -> None:
        if call.started_at is not None:
            return
        call.started_at = time.monotonic()
        self.emit(
            turn.run_id,
            "tool.call.started",
            tool_call_id=call.id,
            name=call.name,
            input=_shown_input(call.input),
        )

    def _complete_tool(
        self, turn: _Turn, call: _ToolCall, update: schema.ToolCallStart | schema.ToolCallProgress
    ) -> None:
        from acp import schema

        call.done = True
        started = call.started_at or time.monotonic()
        output = _tool_output(update)
        self.emit(
            turn.run_id,
            "tool.call.completed",
            tool_call_id=call.id,
            output=output,
            is_error=update.status == "failed",
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        for item in update.content or []:
            if isinstance(item, schema.FileEditToolCallContent):
                change = "modified" if item.old_text else "created"
                self.emit(
                    turn.run_id, "file.changed", path=self._shown_path(item.path), change=change
                )

    def _shown_path(self, raw: str) -> str:
        path = Path(raw)
        try:
            relative = path.relative_to(self.workspace)
        except ValueError:
            return raw
        return str(relative)

    def _finish_turn(self, turn: _Turn, *, interrupted: bool) -> None:
        """Close what is still open: the message, and tool calls the agent never finished."""
        self._close_message(turn, interrupted=interrupted)
        for call in turn.tools.values():
            if call.done:
                continue
            self._start_tool(turn, call)
            call.done = True
            self.emit(
                turn.run_id,
                "tool.call.completed",
                tool_call_id=call.id,
                output=INTERRUPTED_OUTPUT,
                is_error=True,
                duration_ms=int((time.monotonic() - (call.started_at or 0.0)) * 1000),
            )

    # --- permissions ---------------------------------------------------------------------

    async def _on_permission(
        self,
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        options: list[schema.PermissionOption],
    ) -> schema.RequestPermissionResponse:
        from acp import schema

        turn = self._turn
        agent = self.agent
        if turn is None or agent is None or session_id != agent.session_id:
            return _cancelled()
        call = turn.tools.get(tool_call.tool_call_id)
        if call is None:
            self._close_message(turn)
            call = _ToolCall(tool_call.tool_call_id, self._tool_name(tool_call.title))
            turn.tools[call.id] = call
        if tool_call.raw_input:
            call.input = _merged(call.input, tool_call.raw_input)
        self._start_tool(turn, call)
        asked = asyncio.ensure_future(
            self.request_permission(turn.run_id, call.id, call.name, _shown_input(call.input))
        )
        turn.permissions.add(asked)
        try:
            decision = await asked
        except asyncio.CancelledError:
            return _cancelled()  # the run was cancelled: ACP wants `cancelled` for it
        finally:
            turn.permissions.discard(asked)
        call.started_at = time.monotonic()  # the tool's own time starts after the answer
        wanted = (
            ("allow_once", "allow_always")
            if decision == "allow_once"
            else ("reject_once", "reject_always")
        )
        for kind in wanted:  # "always" only when the agent offers nothing else
            for option in options:
                if option.kind == kind:
                    return schema.RequestPermissionResponse(
                        outcome=schema.AllowedOutcome(
                            outcome="selected", option_id=option.option_id
                        )
                    )
        return _cancelled()

    # --- the thread's state --------------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        path = self.state_dir / "session.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("acp_state_unreadable", extra={"error": str(error)})
            return {}
        return data if isinstance(data, dict) else {}

    def _save_state(self, acp_session_id: str, history: Any) -> None:
        data = {
            "version": STATE_VERSION,
            "session_id": self.spec.session_id,
            "acp_session_id": acp_session_id,
            "command": self.command,
            "history": history if isinstance(history, list) else [],
        }
        path = self.state_dir / "session.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False)
        os.replace(temporary, path)

    def _remember(self, acp_session_id: str, user: str, answer: str) -> None:
        """Keep the exchange for a replay (see the module docstring)."""
        history = self._load_state().get("history")
        exchanges = [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []
        exchanges.append({"user": user, "assistant": answer})
        self._save_state(acp_session_id, exchanges[-HISTORY_MAX_EXCHANGES:])


# --- helpers ---------------------------------------------------------------------------------


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a background start's failure as seen (the run that awaits it reports it)."""
    if not task.cancelled():
        task.exception()


def _takes_http_mcp(agent: _AgentProcess) -> bool:
    mcp = agent.capabilities.mcp_capabilities if agent.capabilities else None
    return bool(mcp and mcp.http)


def _merged(old: Any, new: Any) -> Any:
    """A tool call's input as more of it arrives (OpenCode sends `cwd` first, then the rest)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **new}
    return new


def _cancelled() -> schema.RequestPermissionResponse:
    from acp import schema

    return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))


def _block_text(block: Any) -> str:
    return str(getattr(block, "text", "") or "") if getattr(block, "type", "") == "text" else ""


def _shown_input(raw: Any) -> Any:
    return raw if raw is not None else {}


def _tool_output(update: schema.ToolCallStart | schema.ToolCallProgress) -> str:
    """The text the agent showed for a finished tool call, else its raw output."""
    from acp import schema

    texts = [
        _block_text(item.content)
        for item in update.content or []
        if isinstance(item, schema.ContentToolCallContent)
    ]
    text = "".join(t for t in texts if t)
    if not text:
        raw = update.raw_output
        if isinstance(raw, dict) and isinstance(raw.get("output"), str):
            text = raw["output"]
        elif isinstance(raw, str):
            text = raw
        elif raw is not None:
            text = json.dumps(raw, ensure_ascii=False, default=str)
    if len(text) > MAX_TOOL_OUTPUT_CHARS:
        text = text[:MAX_TOOL_OUTPUT_CHARS] + "\n[... output truncated ...]"
    return text


def _replay_text(history: Any) -> str:
    """The thread's earlier exchanges, for the first prompt of a session that could not be
    loaded (newest kept when they are too long)."""
    if not isinstance(history, list) or not history:
        return ""
    blocks: list[str] = []
    size = 0
    for exchange in reversed(history):
        if not isinstance(exchange, dict):
            continue
        block = f"User: {exchange.get('user', '')}\nAssistant: {exchange.get('assistant', '')}"
        size += len(block)
        if size > HISTORY_MAX_CHARS:
            break
        blocks.append(block)
    if not blocks:
        return ""
    body = "\n\n".join(reversed(blocks))
    return f"<conversation_so_far>\n{body}\n</conversation_so_far>"


def _process_tree(root: int) -> set[int]:
    """The pids below `root` (from /proc), root excluded."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _signal_all(root: int, tree: set[int], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signum)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(root, signum)
