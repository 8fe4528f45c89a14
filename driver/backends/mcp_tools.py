"""The bound MCP servers' tools, as tools of a runtime's loop.

At run start each bound server is reached through the forwarder (`/gateway/mcp/<ref>`, the
run's grant as bearer); its tools become `<server>__<tool>` with the policy the Agent set
(off: not offered; allow; ask: the permission prompt). A server that cannot be reached is
reported in a `mcp.server.status` event and the run goes on without it, unless it is
required: then the run fails with `mcp_unavailable`.

A result's text goes to the model; an image is saved under `/workspace/outputs/mcp/` (so it
becomes one of the thread's files) and shown to the model after the step; structured
content goes to the model as JSON when no text says it, and to the tool card as it is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import mimetypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from driver.mcp_client import CONNECT_TIMEOUT_SECONDS, McpClient, McpError
from driver.protocol import McpBinding
from driver.tools.base import Tool, ToolContext, ToolResult

log = logging.getLogger("driver.mcp")

SEPARATOR = "__"
MAX_TOOL_NAME = 64  # OpenAI's limit on function names
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
OUTPUTS_DIR = Path("outputs") / "mcp"
MAX_SAVED_BYTES = 20 * 1024 * 1024
MAX_IMAGE_FOR_MODEL_BYTES = 4 * 1024 * 1024
MAX_STRUCTURED_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 1_000


def model_tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, with characters a model API refuses replaced, and a short hash
    when it would be longer than a function name may be."""
    name = _NAME_CHARS.sub("_", f"{server}{SEPARATOR}{tool}")
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_TOOL_NAME - 9]}_{digest}"


def _parameters(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return schema


def policy_for(binding: McpBinding, tool: str) -> str:
    return binding.tool_policies.get(tool, binding.default_policy)


@dataclass
class Connected:
    binding: McpBinding
    client: McpClient
    tools: list[dict[str, Any]] = field(default_factory=list)


class McpTool(Tool):
    """One remote tool. The class attributes are placeholders: `schema()` is the server's."""

    name = "mcp"
    description = "A tool of an MCP server."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    max_output_chars = 30_000

    def __init__(self, server: Connected, tool: dict[str, Any], model_name: str) -> None:
        self.server = server
        self.remote_name = str(tool["name"])
        self.model_name = model_name
        described = str(tool.get("description") or tool.get("title") or "")
        self.remote_description = described[:MAX_DESCRIPTION_CHARS]
        self.remote_parameters = _parameters(tool.get("inputSchema"))

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.model_name,
                "description": f"[{self.server.binding.name}] {self.remote_description}".strip(),
                "parameters": self.remote_parameters,
            },
        }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        try:
            result = await self.server.client.call_tool(self.remote_name, arguments)
        except McpError as error:
            return ToolResult(
                f"the MCP server {self.server.binding.name} failed: {error.message}",
                is_error=True,
                details={"mcp": {"server": self.server.binding.name, "tool": self.remote_name}},
            )
        return to_tool_result(
            result, context, self.model_name, self.server.binding.name, self.remote_name
        )


def _save(context: ToolContext, stem: str, data: bytes, mime_type: str) -> Path:
    extension = mimetypes.guess_extension(mime_type or "") or ".bin"
    folder = context.workspace / OUTPUTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}{extension}"
    path.write_bytes(data)
    return path


def to_tool_result(
    result: dict[str, Any], context: ToolContext, model_name: str, server: str, tool: str
) -> ToolResult:
    """An MCP `CallToolResult` as a tool result: text for the model, blocks for the card."""
    texts: list[str] = []
    blocks: list[dict[str, Any]] = []
    images: list[str] = []
    changed: list[tuple[str, str]] = []
    stem = f"{model_name}-{hashlib.sha256(json.dumps(result, sort_keys=True, default=str).encode()).hexdigest()[:10]}"
    for index, block in enumerate(result.get("content") or []):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text", ""))
            texts.append(text)
            blocks.append({"type": "text", "text": text})
        elif kind in ("image", "audio") or (
            kind == "resource" and isinstance(block.get("resource"), dict)
        ):
            source = block.get("resource") if kind == "resource" else block
            assert isinstance(source, dict)
            if kind == "resource" and "text" in source:
                text = str(source.get("text", ""))
                texts.append(text)
                blocks.append({"type": "resource", "uri": str(source.get("uri", "")), "text": text})
                continue
            raw = source.get("blob") if kind == "resource" else source.get("data")
            mime_type = str(source.get("mimeType") or "application/octet-stream")
            try:
                data = base64.b64decode(str(raw or ""), validate=True)
            except (binascii.Error, ValueError):
                texts.append(f"[{kind}: undecodable data]")
                continue
            if len(data) > MAX_SAVED_BYTES:
                texts.append(f"[{kind} of {len(data)} bytes, too large to keep]")
                blocks.append({"type": kind, "mime_type": mime_type, "bytes": len(data)})
                continue
            path = _save(context, f"{stem}-{index}", data, mime_type)
            shown = context.display(path)
            changed.append((shown, "created"))
            texts.append(f"[{kind} {mime_type}, {len(data)} bytes, saved to {shown}]")
            blocks.append({"type": kind, "mime_type": mime_type, "bytes": len(data), "path": shown})
            if mime_type.startswith("image/") and len(data) <= MAX_IMAGE_FOR_MODEL_BYTES:
                images.append(f"data:{mime_type};base64,{base64.b64encode(data).decode()}")
        elif kind == "resource_link":
            uri, name = str(block.get("uri", "")), str(block.get("name", ""))
            texts.append(f"[resource link: {name} {uri}]".replace("  ", " "))
            blocks.append({"type": "resource_link", "uri": uri, "name": name})
    structured = result.get("structuredContent")
    details: dict[str, Any] = {"mcp": {"server": server, "tool": tool}, "content": blocks}
    if isinstance(structured, dict):
        encoded = json.dumps(structured, ensure_ascii=False)
        details["structured_content"] = (
            structured if len(encoded) <= MAX_STRUCTURED_CHARS else {"truncated": True}
        )
        if not any(_same_json(text, structured) for text in texts):
            texts.append(f"structured content: {encoded[:MAX_STRUCTURED_CHARS]}")
    output = "\n".join(texts) if texts else "(the tool returned no content)"
    return ToolResult(
        output,
        is_error=bool(result.get("isError")),
        changed_files=changed,
        details=details,
        images=images,
    )


def _same_json(text: str, value: Any) -> bool:
    if value == {"result": text}:  # how SDK servers wrap a plain return value
        return True
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


@dataclass
class McpConnections:
    """The run's connected servers and their tools, by the name the model calls them."""

    servers: list[Connected] = field(default_factory=list)
    tools: dict[str, McpTool] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)
    failures: list[tuple[McpBinding, str]] = field(default_factory=list)

    async def close(self) -> None:
        for server in self.servers:
            await server.client.close()
        self.servers = []


async def _connect(base_url: str, binding: McpBinding, timeout: float) -> Connected:
    client = McpClient(f"{base_url}/{binding.ref}", binding.grant)
    try:
        async with asyncio.timeout(timeout):
            await client.initialize()
            tools = await client.list_tools()
    except BaseException:
        await client.close()
        raise
    return Connected(binding=binding, client=client, tools=tools)


def _reason(error: BaseException) -> str:
    if isinstance(error, McpError):
        return error.message
    if isinstance(error, TimeoutError):
        return "the server did not answer in time"
    return f"{type(error).__name__}: {error}"[:300]


async def connect_servers(
    base_url: str,
    bindings: list[McpBinding],
    taken: set[str],
    *,
    timeout: float = CONNECT_TIMEOUT_SECONDS,
) -> McpConnections:
    """Connect to every bound server at once; `taken` are the names already in use (the
    built-in tools), which an MCP tool never shadows."""
    outcomes = await asyncio.gather(
        *(_connect(base_url, binding, timeout) for binding in bindings), return_exceptions=True
    )
    connections = McpConnections()
    names = set(taken)
    for binding, outcome in zip(bindings, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            connections.failures.append((binding, _reason(outcome)))
            continue
        connections.servers.append(outcome)
        for tool in outcome.tools:
            policy = policy_for(binding, str(tool["name"]))
            if policy == "off":
                continue
            name = model_tool_name(binding.name, str(tool["name"]))
            if name in names:
                log.warning("mcp_tool_name_taken", extra={"tool": name})
                continue
            names.add(name)
            connections.tools[name] = McpTool(outcome, tool, name)
            connections.policies[name] = policy
    return connections
