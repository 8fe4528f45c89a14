"""The `openai` runtime: an agent tool loop over an OpenAI-compatible API.

We run the loop ourselves — one streamed model call per step, then the step's tool calls —
instead of an agents framework, because each step has to map to exact protocol events,
stop for our permission prompts, and stop at once on `turn.cancel` (both the model stream
and a running tool). The official `openai` SDK does the HTTP and SSE parsing. Its base URL
is the in-sandbox forwarder (`.../gateway/openai/v1`) and its API key the run's gateway
grant, so no provider key ever enters the sandbox.

A step speaks one of two APIs, as the grant's `api_style` says: Chat Completions (every
OpenAI-compatible server) or the Responses API (where the provider has it). Only the model
call differs — the request and the mapping of its stream onto our events
(`_stream_chat_completions` / `_stream_responses`); the loop, tools, permissions, cancel,
retry and the saved conversation are shared.

Each thread's conversation lives in `<workspace>/.mosoo/sessions/<session_id>.json`, so a
new container restored from a workspace checkpoint continues the same thread, and the
threads of a Pet agent that share one workspace keep separate conversations. It is stored
as Chat Completions messages whatever the API; the Responses API gets it converted to
input items at each call (`_responses_input`), so a thread also survives a provider change.

A model step that fails in transport (control restarting under the forwarder, a dropped
connection) is tried again with backoff for up to MODEL_RETRY_BUDGET_SECONDS instead of
failing the run. Text already streamed for the failed attempt is closed as an interrupted
message (`message.completed {interrupted: true}`) and kept out of the saved conversation;
the retried step streams as a new message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
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
from driver.backends.mcp_tools import McpConnections, connect_servers
from driver.protocol import ExecutionSpec, SkillBinding
from driver.tools import Tool, ToolContext, ToolResult, builtin_tools

if TYPE_CHECKING:  # the SDK is imported at the first model call: an idle driver goes without
    import openai

log = logging.getLogger("driver.backend.openai")

# What the runtime imports at its first model call; checked at start (see require_packages).
PACKAGES = ("openai", "httpx")

MAX_STEPS = 50
CONVERSATIONS_DIR = Path(".mosoo") / "sessions"
CONVERSATION_VERSION = 1
# Chat Completions parameters an agent's provider options may set.
PASSTHROUGH_OPTIONS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "stop",
)
# Responses API parameters an agent's provider options may set (`max_tokens`,
# `max_completion_tokens` and `reasoning_effort` are translated; see `_responses_request`).
RESPONSES_PASSTHROUGH_OPTIONS = (
    "temperature",
    "top_p",
    "max_output_tokens",
    "parallel_tool_calls",
    "store",
)
# Responses API errors worth running the turn again for.
RETRYABLE_RESPONSE_ERRORS = frozenset({"server_error", "rate_limit_exceeded"})
# Where OpenAI-compatible servers put streamed reasoning (DeepSeek, vLLM / OpenRouter, Ollama).
REASONING_FIELDS = ("reasoning_content", "reasoning")
# Transport failures of a model step: wait 0.5 s, then twice as long each time up to 5 s,
# for at most 90 s from the first failure (a control restart takes a few seconds).
MODEL_RETRY_INITIAL_SECONDS = 0.5
MODEL_RETRY_MAX_SECONDS = 5.0
MODEL_RETRY_BUDGET_SECONDS = 90.0
# The error code of the forwarder's own 502 answer when control cannot be reached.
FORWARDER_ERROR_CODE = "forwarder_error"
REJECTED_OUTPUT = "rejected by the user"
INTERRUPTED_OUTPUT = "the tool call was interrupted before it finished"


@dataclass
class _ToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class _TransportFailure(Exception):
    """A model attempt broke in transport; the step may be tried again."""


@dataclass
class _Step:
    text: str = ""
    tool_calls: list[_ToolCall] = field(default_factory=list)


@dataclass
class _Attempt:
    """What one model call has streamed so far; filled in by either API's stream mapping."""

    run_id: str
    message_id: str | None = None
    text_parts: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCall] = field(default_factory=dict)  # by the stream's index
    done: bool = False  # the model finished its answer (a finish_reason, response.completed)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


class OpenAIBackend(Backend):
    runtime = "openai"
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
        mcp_base_url: str | None = None,
        max_steps: int = MAX_STEPS,
        max_retries: int = 2,
        retry_budget: float = MODEL_RETRY_BUDGET_SECONDS,
        retry_initial_delay: float = MODEL_RETRY_INITIAL_SECONDS,
        retry_max_delay: float = MODEL_RETRY_MAX_SECONDS,
    ) -> None:
        super().__init__(spec, sink)
        self.model_base_url = model_base_url
        # Control's MCP proxy beside the model gateway, through the same forwarder.
        self.mcp_base_url = mcp_base_url or model_base_url.removesuffix("/openai/v1") + "/mcp"
        self.mcp: McpConnections | None = None  # connected at the first run
        self.max_steps = max_steps
        self.max_retries = max_retries  # the SDK's own quick retries, within one attempt
        self.retry_budget = retry_budget
        self.retry_initial_delay = retry_initial_delay
        self.retry_max_delay = retry_max_delay
        available = builtin_tools()
        self.tools: dict[str, Tool] = {}
        self.policies: dict[str, str] = {
            str(name): str(policy) for name, policy in spec.tools.items()
        }
        for name in spec.tools:
            if name in available:
                self.tools[name] = available[name]
            else:
                log.warning("tool_not_available", extra={"tool": name})
        self.tool_context = ToolContext(
            workspace=self.workspace, environment=dict(spec.environment)
        )
        safe_id = "".join(ch for ch in spec.session_id if ch.isalnum() or ch in "-_") or "session"
        self.conversation_path = self.workspace / CONVERSATIONS_DIR / f"{safe_id}.json"
        self.messages: list[dict[str, Any]] = []
        self._client: openai.AsyncOpenAI | None = None
        # The one part of a step that depends on the API: the call and its stream mapping.
        self._stream_step = (
            self._stream_responses
            if spec.gateway.api_style == "responses"
            else self._stream_chat_completions
        )

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        require_packages(self.runtime, *PACKAGES)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.messages = self._load_conversation()
        log.info(
            "backend_started",
            extra={
                "runtime": self.runtime,
                "model": self.spec.model,
                "api_style": self.spec.gateway.api_style,
                "tools": sorted(self.tools),
            },
        )

    async def _model_client(self) -> openai.AsyncOpenAI:
        """The SDK's client, made (and the SDK imported) at the first model call."""
        if self._client is None:
            # httpx too, though the SDK does not import it: the SDK reads `sys.modules["httpx"]`
            # as it makes the client (openai/_httpx2.py, to accept a legacy httpx client), and
            # while another thread is importing httpx (the forwarder's, a tool's) that module is
            # there half-initialized: "partially initialized module 'httpx' has no attribute
            # 'Timeout'" failed runs. Importing it here waits for that import to finish.
            await import_packages(*PACKAGES)
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=self.model_base_url,
                api_key=self.spec.gateway.grant,
                max_retries=self.max_retries,
                # trust_env=False: a sandbox's HTTP(S)_PROXY (egress policy) must not catch loopback.
                http_client=openai.DefaultAsyncHttpxClient(
                    trust_env=False, timeout=openai.Timeout(600.0, connect=10.0)
                ),
            )
        return self._client

    async def close(self) -> None:
        await super().close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        mcp, self.mcp = self.mcp, None
        if mcp is not None:
            await mcp.close()

    async def _connect_mcp(self, run_id: str) -> None:
        """Reach the bound MCP servers (once per driver: a driver serves one run's grants)
        and offer their tools; an unreachable one is reported, and fails the run if it is
        required."""
        if self.mcp is not None or not self.spec.mcp_servers:
            return
        self.mcp = await connect_servers(
            self.mcp_base_url, list(self.spec.mcp_servers), set(self.tools)
        )
        for server in self.mcp.servers:
            offered = sum(1 for t in self.mcp.tools.values() if t.server is server)
            self.emit(
                run_id,
                "mcp.server.status",
                server=server.binding.name,
                status="connected",
                tools=offered,
                required=server.binding.required,
            )
        for binding, reason in self.mcp.failures:
            log.warning("mcp_server_unavailable", extra={"server": binding.name, "reason": reason})
            self.emit(
                run_id,
                "mcp.server.status",
                server=binding.name,
                status="failed",
                reason=reason,
                required=binding.required,
            )
        self.tools.update(self.mcp.tools)
        self.policies.update(self.mcp.policies)
        required = [binding.name for binding, _ in self.mcp.failures if binding.required]
        if required:
            raise RunFailure(
                "mcp_unavailable",
                f"The required MCP server {', '.join(required)} is unavailable: "
                + "; ".join(reason for b, reason in self.mcp.failures if b.required),
                retryable=True,
            )

    async def prepare_checkpoint(self, paths: list[str]) -> dict[str, Any]:
        if self.active_run_id is None:
            await asyncio.to_thread(self._save_conversation)
        return await super().prepare_checkpoint(paths)

    # --- the loop ------------------------------------------------------------------------

    async def execute(self, run: RunInput) -> str:
        await self._connect_mcp(run.run_id)
        self.messages.append({"role": "user", "content": user_text(run)})
        self._save_conversation()
        for step_number in range(1, self.max_steps + 1):
            step = await self._model_step(run.run_id)
            assistant: dict[str, Any] = {"role": "assistant", "content": step.text or None}
            if step.tool_calls:
                assistant["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in step.tool_calls
                ]
            self.messages.append(assistant)
            if not step.tool_calls:
                self._save_conversation()
                return step.text
            await self._run_tool_calls(run.run_id, step.tool_calls)
            self._save_conversation()
            log.debug("step_done", extra={"run_id": run.run_id, "step": step_number})
        raise RunFailure(
            "tool_loop_limit",
            f"the agent made {self.max_steps} model calls without a final answer",
            retryable=False,
        )

    async def _model_step(self, run_id: str) -> _Step:
        """One model call; tried again with backoff while it fails in transport. A cancel
        interrupts the wait at once (it is a plain sleep in the run's task)."""
        delay = self.retry_initial_delay
        deadline: float | None = None
        attempt = 1
        while True:
            try:
                return await self._model_attempt(run_id)
            except _TransportFailure as failure:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_budget
                if now + delay > deadline:
                    raise RunFailure(
                        "model_error",
                        f"could not reach the model gateway for {self.retry_budget:g} s ({attempt} attempts): {failure}",
                        retryable=True,
                    ) from None
                log.warning(
                    "model_call_retrying",
                    extra={
                        "run_id": run_id,
                        "attempt": attempt,
                        "delay_seconds": delay,
                        "error": str(failure),
                    },
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max_delay)
                attempt += 1

    async def _model_attempt(self, run_id: str) -> _Step:
        await self._model_client()
        import httpx
        import openai

        attempt = _Attempt(run_id)
        try:
            await self._stream_step(attempt)
        except asyncio.CancelledError:
            if attempt.text_parts:  # keep what the user already saw in the thread
                self.messages.append({"role": "assistant", "content": attempt.text})
            self._save_conversation()
            raise
        except RunFailure:  # the model reported a failure mid-answer
            self._interrupt_message(attempt)
            raise
        except (openai.APIConnectionError, httpx.TransportError, openai.APIStatusError) as error:
            if isinstance(error, openai.APIStatusError) and not _is_forwarder_error(error):
                self._interrupt_message(attempt)
                raise _model_failure(error) from None
            if not attempt.done:
                self._interrupt_message(attempt)
                raise _TransportFailure(_describe(error)) from None
            # Only the tail (usage, [DONE]) is missing: the answer itself is whole.
            log.warning(
                "model_stream_tail_lost", extra={"run_id": run_id, "error": _describe(error)}
            )
        except openai.APIError as error:
            self._interrupt_message(attempt)
            raise _model_failure(error) from None
        step = _Step(text=attempt.text)
        if attempt.message_id is not None:
            self.emit(run_id, "message.completed", message_id=attempt.message_id, text=step.text)
        for index in sorted(attempt.calls):
            call = attempt.calls[index]
            if not call.id:
                call.id = f"call_{uuid.uuid4().hex[:24]}"
            step.tool_calls.append(call)
        return step

    def _interrupt_message(self, attempt: _Attempt) -> None:
        """Close what the user saw of a broken attempt; it stays out of the conversation."""
        if attempt.message_id is not None:
            self.emit(
                attempt.run_id,
                "message.completed",
                message_id=attempt.message_id,
                text=attempt.text,
                interrupted=True,
            )

    # What either API's stream mapping reports while it reads.

    def _on_text(self, attempt: _Attempt, text: str | None) -> None:
        if not text:
            return
        if attempt.message_id is None:
            attempt.message_id = f"msg_{uuid.uuid4().hex}"
            self.emit(attempt.run_id, "message.started", message_id=attempt.message_id)
        attempt.text_parts.append(text)
        self.emit(attempt.run_id, "message.delta", message_id=attempt.message_id, text=text)

    def _on_thought(self, attempt: _Attempt, text: str | None) -> None:
        if text:
            self.emit(attempt.run_id, "thought.delta", text=text)

    def _on_usage(self, attempt: _Attempt, numbers: dict[str, Any], model: str | None) -> None:
        self.emit(attempt.run_id, "usage.updated", **numbers, model=model or self.spec.model)

    # --- Chat Completions ----------------------------------------------------------------

    async def _stream_chat_completions(self, attempt: _Attempt) -> None:
        assert self._client is not None
        stream = await self._client.chat.completions.create(**self._chat_request())
        try:
            async for chunk in stream:
                if chunk.usage is not None:
                    self._on_usage(attempt, _chat_usage(chunk.usage), chunk.model)
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta is not None:
                    self._on_thought(attempt, _reasoning_text(delta))
                    self._on_text(attempt, delta.content)
                    for call_delta in delta.tool_calls or []:
                        call = attempt.calls.setdefault(call_delta.index, _ToolCall())
                        if call_delta.id and not call.id:
                            call.id = call_delta.id
                        function = call_delta.function
                        if function is not None:
                            if function.name and not call.name:
                                call.name = function.name
                            if function.arguments:
                                call.arguments += function.arguments
                if choice.finish_reason:
                    attempt.done = True
        finally:
            await stream.close()

    def _chat_request(self) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        system_prompt = self._system_prompt()
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend(self.messages)
        request: dict[str, Any] = {
            "model": self.spec.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.tools:
            request["tools"] = [tool.schema() for tool in self.tools.values()]
        options = self.spec.provider_options
        for key in PASSTHROUGH_OPTIONS:
            if options.get(key) is not None:
                request[key] = options[key]
        if isinstance(options.get("extra_body"), dict):
            request["extra_body"] = options["extra_body"]
        return request

    # --- Responses API -------------------------------------------------------------------

    async def _stream_responses(self, attempt: _Attempt) -> None:
        assert self._client is not None
        stream = await self._client.responses.create(**self._responses_request())
        try:
            async for event in stream:
                kind = getattr(event, "type", "")
                if kind in ("response.output_text.delta", "response.refusal.delta"):
                    self._on_text(attempt, event.delta)
                elif kind in (
                    "response.reasoning_summary_text.delta",
                    "response.reasoning_text.delta",
                ):
                    self._on_thought(attempt, event.delta)
                elif kind in ("response.output_item.added", "response.output_item.done"):
                    item = event.item
                    if getattr(item, "type", None) != "function_call":
                        continue
                    call = attempt.calls.setdefault(event.output_index, _ToolCall())
                    call.id = call.id or item.call_id or ""
                    call.name = call.name or item.name or ""
                    if kind == "response.output_item.done" and isinstance(item.arguments, str):
                        call.arguments = item.arguments  # the whole arguments win over the deltas
                elif kind == "response.function_call_arguments.delta":
                    attempt.calls.setdefault(event.output_index, _ToolCall()).arguments += (
                        event.delta or ""
                    )
                elif kind == "response.function_call_arguments.done":
                    attempt.calls.setdefault(event.output_index, _ToolCall()).arguments = (
                        event.arguments or ""
                    )
                elif kind in ("response.completed", "response.incomplete"):
                    response = event.response
                    if response.usage is not None:
                        self._on_usage(attempt, _responses_usage(response.usage), response.model)
                    if kind == "response.incomplete":  # e.g. max_output_tokens: keep what came
                        reason = getattr(
                            getattr(response, "incomplete_details", None), "reason", None
                        )
                        log.warning(
                            "model_answer_incomplete",
                            extra={"run_id": attempt.run_id, "reason": reason},
                        )
                    attempt.done = True
                elif kind == "response.failed":
                    error = getattr(event.response, "error", None)
                    raise _response_failure(
                        getattr(error, "code", None), getattr(error, "message", None)
                    )
                elif kind == "error":
                    raise _response_failure(event.code, event.message)
        finally:
            await stream.close()

    def _responses_request(self) -> dict[str, Any]:
        options = self.spec.provider_options
        request: dict[str, Any] = {
            "model": self.spec.model,
            "instructions": self._system_prompt(),
            "input": _responses_input(self.messages),
            "stream": True,
            # We send the whole conversation each step and never refer to a stored response,
            # so the provider need not keep one (an agent's provider options may say otherwise).
            "store": False,
        }
        if self.tools:
            request["tools"] = [_responses_tool(tool.schema()) for tool in self.tools.values()]
        for key in ("max_tokens", "max_completion_tokens"):  # Chat Completions names
            if options.get(key) is not None:
                request["max_output_tokens"] = options[key]
        for key in RESPONSES_PASSTHROUGH_OPTIONS:
            if options.get(key) is not None:
                request[key] = options[key]
        reasoning = dict(options["reasoning"]) if isinstance(options.get("reasoning"), dict) else {}
        if options.get("reasoning_effort") is not None:
            reasoning.setdefault("effort", options["reasoning_effort"])
        if reasoning:
            request["reasoning"] = reasoning
        if isinstance(options.get("extra_body"), dict):
            request["extra_body"] = options["extra_body"]
        return request

    # --- shared ----------------------------------------------------------------------------

    def _system_prompt(self) -> str:
        parts = [self.spec.system_prompt.strip()] if self.spec.system_prompt.strip() else []
        parts.append(f"Your working directory is {self.workspace}.")
        if self.spec.skills:
            parts.append(skills_prompt(self.spec.skills))
        return "\n\n".join(parts)

    # --- tools ---------------------------------------------------------------------------

    async def _run_tool_calls(self, run_id: str, calls: list[_ToolCall]) -> None:
        done: set[str] = set()
        images: list[str] = []
        try:
            for call in calls:
                result = await self._run_tool_call(run_id, call)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": result.output}
                )
                images += result.images
                done.add(call.id)
            if images:
                # Tool messages carry text only: the images a tool returned follow the step.
                self.messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "The images the tools returned:"},
                            *({"type": "image_url", "image_url": {"url": url}} for url in images),
                        ],
                    }
                )
        except asyncio.CancelledError:
            # Every tool call needs an answer or the next request is refused.
            for call in calls:
                if call.id not in done:
                    self.messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": INTERRUPTED_OUTPUT}
                    )
            self._save_conversation()
            raise

    async def _run_tool_call(self, run_id: str, call: _ToolCall) -> ToolResult:
        arguments, parse_error = _parse_arguments(call.arguments)
        shown_input: Any = arguments if parse_error is None else {"raw_arguments": call.arguments}
        self.emit(
            run_id, "tool.call.started", tool_call_id=call.id, name=call.name, input=shown_input
        )
        started = time.monotonic()
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            result = ToolResult(
                f"unknown tool {call.name!r}; available tools: {available}", is_error=True
            )
        elif parse_error is not None:
            result = ToolResult(
                f"the arguments are not a valid JSON object: {parse_error}", is_error=True
            )
        else:
            if self.policies.get(call.name) == "ask":
                decision = await self.request_permission(run_id, call.id, call.name, arguments)
                started = time.monotonic()
            else:
                decision = "allow_once"
            if decision == "allow_once":
                result = await tool.run(arguments, self.tool_context)
            else:
                result = ToolResult(REJECTED_OUTPUT, is_error=True)
        duration_ms = int((time.monotonic() - started) * 1000)
        self.emit(
            run_id,
            "tool.call.completed",
            tool_call_id=call.id,
            output=result.output,
            is_error=result.is_error,
            duration_ms=duration_ms,
            **result.details,
        )
        for path, change in result.changed_files:
            self.emit(run_id, "file.changed", path=path, change=change)
        return result

    # --- conversation --------------------------------------------------------------------

    def _load_conversation(self) -> list[dict[str, Any]]:
        path = self.conversation_path
        if not path.exists():
            return []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            log.warning("conversation_unreadable", extra={"error": str(error)})
            return []
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            log.warning("conversation_unreadable", extra={"error": "unexpected shape"})
            return []
        if data.get("session_id") not in (None, self.spec.session_id):
            log.warning("conversation_of_another_session", extra={"found": data.get("session_id")})
            return []
        messages = [
            m for m in data["messages"] if isinstance(m, dict) and isinstance(m.get("role"), str)
        ]
        log.info("conversation_loaded", extra={"messages": len(messages)})
        return _answer_dangling_tool_calls(messages)

    def _save_conversation(self) -> None:
        path = self.conversation_path
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": CONVERSATION_VERSION,
            "session_id": self.spec.session_id,
            "messages": self.messages,
        }
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False)
        os.replace(temporary, path)


# --- pure helpers --------------------------------------------------------------------------


def xml_escape(text: str) -> str:
    """What `xml.sax.saxutils.escape` does (&, <, >), without importing it: it brings
    urllib.request, http.client and email into a cold driver's warm-up (18 ms of imports on
    the host; with h11, 9 ms of a driver's start in the image, bench/footprint.py)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def skills_prompt(skills: list[SkillBinding]) -> str:
    """The bound skills for the system prompt: only names, descriptions and where SKILL.md
    is cost tokens up front; the model reads a skill when a task calls for it."""
    lines = [
        "When a task matches one of these skills, read its SKILL.md with the read tool before "
        "you start, and follow it (paths it mentions are relative to its folder).",
        "<available_skills>",
    ]
    for skill in skills:
        lines += [
            "<skill>",
            f"<name>{xml_escape(skill.name)}</name>",
            f"<description>{xml_escape(skill.description)}</description>",
            f"<location>{xml_escape(skill.path)}</location>",
            "</skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)


def _reasoning_text(delta: Any) -> str:
    extra = getattr(delta, "model_extra", None) or {}
    for name in REASONING_FIELDS:
        value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _chat_usage(usage: Any) -> dict[str, Any]:
    """`usage.updated` numbers from a Chat Completions usage chunk."""
    return _usage_numbers(
        usage.prompt_tokens,
        usage.completion_tokens,
        getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None),
        getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None),
    )


def _responses_usage(usage: Any) -> dict[str, Any]:
    """`usage.updated` numbers from a Responses API `response.usage`."""
    return _usage_numbers(
        getattr(usage, "input_tokens", None),
        getattr(usage, "output_tokens", None),
        getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None),
        getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", None),
    )


def _usage_numbers(
    input_tokens: Any, output_tokens: Any, cached: Any, reasoning: Any
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "input_tokens": input_tokens or 0,
        "output_tokens": output_tokens or 0,
    }
    if cached is not None:
        payload["cached_input_tokens"] = cached
    if reasoning is not None:
        payload["reasoning_tokens"] = reasoning
    return payload


def _responses_tool(schema: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions `tools[]` entry as a Responses API function tool (flat, and not
    strict: our schemas have optional properties, which strict mode refuses)."""
    function = schema["function"]
    return {
        "type": "function",
        "name": function["name"],
        "description": function.get("description", ""),
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        "strict": False,
    }


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep their text
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The saved conversation (Chat Completions messages) as Responses API input items:
    an assistant's tool calls become `function_call` items and tool results
    `function_call_output` items, paired by `call_id`."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            output = _plain_text(message.get("content"))
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id")),
                    "output": output,
                }
            )
        elif role == "assistant":
            text = _plain_text(message.get("content"))
            if text:
                items.append({"role": "assistant", "content": text})
            for call in message.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": str(call.get("id")),
                        "name": str(function.get("name", "")),
                        "arguments": function.get("arguments") or "",
                    }
                )
        elif role in ("user", "system", "developer"):
            items.append({"role": role, "content": _plain_text(message.get("content"))})
    return items


def _parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as error:
        return {}, str(error)
    if not isinstance(value, dict):
        return {}, f"expected an object, got {type(value).__name__}"
    return value, None


def _model_failure(error: openai.APIError) -> RunFailure:
    import openai

    if isinstance(error, openai.APIConnectionError):
        return RunFailure(
            "model_error", f"could not reach the model gateway: {error.message}", retryable=True
        )
    if isinstance(error, openai.APIStatusError):
        retryable = error.status_code == 429 or error.status_code >= 500
        return RunFailure(
            "model_error",
            f"the model call failed ({error.status_code}): {error.message}",
            retryable=retryable,
        )
    return RunFailure("model_error", f"the model call failed: {error.message}", retryable=False)


def _response_failure(code: str | None, message: str | None) -> RunFailure:
    """A Responses API `response.failed` or `error` event."""
    detail = message or "no reason given"
    if code:
        detail += f" ({code})"
    return RunFailure(
        "model_error",
        f"the model call failed: {detail}",
        retryable=code in RETRYABLE_RESPONSE_ERRORS,
    )


def _is_forwarder_error(error: openai.APIStatusError) -> bool:
    """The in-sandbox forwarder's 502: control itself was unreachable (e.g. restarting)."""
    if error.status_code != 502:
        return False
    body: dict[str, Any] = error.body if isinstance(error.body, dict) else {}
    nested = body.get("error")
    nested_code = nested.get("code") if isinstance(nested, dict) else None
    return FORWARDER_ERROR_CODE in (getattr(error, "code", None), body.get("code"), nested_code)


def _describe(error: Exception) -> str:
    import httpx

    cause = error.__cause__ or error.__context__
    text = f"{type(error).__name__}: {error}"
    if cause is not None and not isinstance(error, httpx.TransportError):
        text += f" ({type(cause).__name__}: {cause})"
    return text[:500]


def _answer_dangling_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conversation saved mid-step may hold tool calls without results; answer them."""
    repaired: list[dict[str, Any]] = []
    waiting: list[str] = []
    for message in messages:
        if message["role"] != "tool" and waiting:
            repaired.extend(
                {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_OUTPUT}
                for call_id in waiting
            )
            waiting = []
        if message["role"] == "tool" and message.get("tool_call_id") in waiting:
            waiting.remove(message["tool_call_id"])
        repaired.append(message)
        if message["role"] == "assistant":
            waiting = [
                str(call.get("id"))
                for call in message.get("tool_calls") or []
                if isinstance(call, dict)
            ]
    repaired.extend(
        {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_OUTPUT}
        for call_id in waiting
    )
    return repaired
