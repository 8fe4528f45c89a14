"""Test connection: the official MCP SDK opens a Streamable HTTP session with the server (the
initialize handshake, as the sandbox's own client does), lists its tools page by page, and
closes. Runs on the web side, with the credential headers in memory only, and connects only
where the outbound guard lets it (`network.outbound`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx2

from mosoo_core.network import outbound

PROBE_TIMEOUT_SECONDS = 20.0
MAX_PAGES = 20
MAX_TOOLS = 500
MAX_SCHEMA_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 2_000


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    tools: list[dict[str, Any]] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    # The HTTP status that refused us (401: the credential is missing or was refused).
    status: int | None = None


def _tool_entry(tool: Any) -> dict[str, Any]:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    if len(repr(schema)) > MAX_SCHEMA_CHARS:
        schema = {"type": "object", "description": "(schema too large to keep)"}
    return {
        "name": str(tool.name)[:128],
        "title": str(getattr(tool, "title", None) or "")[:200],
        "description": str(tool.description or "")[:MAX_DESCRIPTION_CHARS],
        "input_schema": schema,
    }


def _http_status(error: BaseException) -> int | None:
    for item in _leaves(error):
        if isinstance(item, httpx2.HTTPStatusError):
            return int(item.response.status_code)
    return None


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in error.exceptions:
            found += _leaves(inner)
        return found
    chain = [error]
    cause = error.__cause__ or error.__context__
    if cause is not None and cause is not error:
        chain.append(cause)
    return chain


def describe_failure(error: BaseException, status: int | None = None) -> tuple[str, int | None]:
    """A one-line reason without any header value (the SDK's messages carry none)."""
    refusal = outbound.refusal_in(error)
    if refusal is not None:  # the guard's own words, naming the host and address
        return str(refusal), None
    status = status or _http_status(error)
    if status == 401:
        return "The server refused the credential (HTTP 401).", status
    if status == 403:
        return "The server refused access (HTTP 403).", status
    if status is not None:
        return f"The server answered HTTP {status}.", status
    from mcp.shared.exceptions import MCPError

    for item in _leaves(error):
        if isinstance(item, MCPError):
            return f"The server answered an MCP error: {item.message}"[:500], None
        if isinstance(item, httpx2.ConnectError | ConnectionError | OSError):
            return "The server could not be reached (connection refused or no route).", None
        if isinstance(item, httpx2.TimeoutException | TimeoutError):
            return "The server did not answer in time.", None
    first = _leaves(error)[0]
    return f"The connection failed: {type(first).__name__}: {first}"[:500], None


async def probe_server(
    url: str, headers: dict[str, str], timeout: float = PROBE_TIMEOUT_SECONDS
) -> ProbeResult:
    """Initialize a session, list every tool (following `nextCursor`), close."""
    # The SDK here only (about 15 MB): control and the worker import this package, never probe.
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    refusals: list[int] = []

    async def note_status(response: httpx2.Response) -> None:
        # The SDK turns an HTTP refusal into a generic MCP error: keep the status for the reason.
        if response.status_code >= 400:
            refusals.append(response.status_code)

    # Every connection (redirects too) through the outbound guard; no proxy from the
    # environment, which would resolve the name where the guard cannot check it.
    http = httpx2.AsyncClient(
        transport=outbound.async_transport2(),
        trust_env=False,
        headers=headers,
        timeout=httpx2.Timeout(timeout, read=timeout),
        event_hooks={"response": [note_status]},
    )
    try:
        async with asyncio.timeout(timeout * 2), http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="legacy", cache=None) as client:
                tools: list[dict[str, Any]] = []
                cursor: str | None = None
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools += [_tool_entry(tool) for tool in page.tools]
                    cursor = page.next_cursor
                    if not cursor or len(tools) >= MAX_TOOLS:
                        break
                info = client.server_info
                server_info = {
                    "name": str(info.name) if info else "",
                    "version": str(info.version) if info else "",
                    "protocol_version": str(client.protocol_version),
                }
                return ProbeResult(ok=True, tools=tools[:MAX_TOOLS], server_info=server_info)
    except asyncio.CancelledError:
        raise
    except BaseException as error:  # the SDK's task groups raise groups
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        message, status = describe_failure(error, refusals[0] if refusals else None)
        return ProbeResult(ok=False, error=message, status=status)


def probe(url: str, headers: dict[str, str], timeout: float = PROBE_TIMEOUT_SECONDS) -> ProbeResult:
    """`probe_server` from synchronous code (a worker thread: no event loop running)."""
    return asyncio.run(probe_server(url, headers, timeout))
