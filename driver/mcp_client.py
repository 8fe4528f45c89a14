"""A compact MCP client over Streamable HTTP, for the sandbox (the official SDK stays out of
the image: it would bring a web server's worth of dependencies for four requests).

JSON-RPC 2.0 over POST; each answer is JSON or an SSE stream that carries the response
(notifications and server requests on the way are skipped; a server request is answered
with "method not found", since we offer no sampling, roots or elicitation). The session id
the server gives at `initialize` goes back as `Mcp-Session-Id`, and the negotiated version
as `MCP-Protocol-Version`, on every later request. The URL is the in-sandbox forwarder's
`/gateway/mcp/<ref>` and the bearer a per-run grant: control adds the real credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from driver import __version__

if TYPE_CHECKING:  # imported by the first client: most drivers never reach an MCP server
    import httpx

log = logging.getLogger("driver.mcp")

PROTOCOL_VERSION = "2025-06-18"
# The handshake-era revisions whose messages we read the same way.
SUPPORTED_PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
MAX_LIST_PAGES = 20
MAX_ANSWER_BYTES = 16 * 1024 * 1024
CONNECT_TIMEOUT_SECONDS = 20.0
CALL_TIMEOUT_SECONDS = 300.0


class McpError(Exception):
    """A failed MCP exchange: an HTTP refusal, a JSON-RPC error or a broken answer."""

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def _describe_http(response: httpx.Response, body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        error = answer.get("error")
        if isinstance(error, dict) and error.get("message"):
            return f"HTTP {response.status_code}: {str(error['message'])[:300]}"
    return f"HTTP {response.status_code}"


class McpClient:
    def __init__(
        self,
        url: str,
        grant: str,
        *,
        timeout: float = CALL_TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self._next_id = 0
        self._refusals: set[asyncio.Task[None]] = set()
        import httpx

        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {grant}"},
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
            # A sandbox's HTTP(S)_PROXY (the `limited` policy) must not catch loopback.
            trust_env=False,
            follow_redirects=False,
        )

    async def __aenter__(self) -> McpClient:
        try:
            await self.initialize()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the session ----------------------------------------------------------------------

    async def initialize(self) -> dict[str, Any]:
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "mosoo-driver", "version": __version__},
            },
        )
        version = result.get("protocolVersion")
        if not isinstance(version, str) or version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise McpError(f"the server speaks MCP {version!r}, which this client does not")
        self.protocol_version = version
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else {}
        await self.notify("notifications/initialized")
        return result

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool, following `nextCursor`."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            listed = page.get("tools")
            tools += [tool for tool in listed or [] if isinstance(tool, dict) and tool.get("name")]
            cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
            if not cursor:
                break
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's result (`content`, `structuredContent`, `isError`)."""
        request_id = self._next_id + 1
        try:
            return await self.request("tools/call", {"name": name, "arguments": arguments})
        except asyncio.CancelledError:
            # Tell the server (best effort, briefly) that nobody waits for the answer anymore.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(
                        self.notify(
                            "notifications/cancelled",
                            {"requestId": request_id, "reason": "cancelled by the user"},
                        )
                    ),
                    timeout=2,
                )
            raise

    async def close(self) -> None:
        if self.session_id:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._http.delete(self.url, headers=self._headers()), timeout=5
                )
        await self._http.aclose()

    # --- JSON-RPC over Streamable HTTP -----------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        return headers

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        response = await self._http.post(self.url, json=message, headers=self._headers())
        if response.status_code >= 400:
            raise McpError(_describe_http(response, response.content), status=response.status_code)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        async with self._http.stream(
            "POST", self.url, json=message, headers=self._headers()
        ) as response:
            if response.status_code >= 400:
                body = await response.aread()
                raise McpError(_describe_http(response, body), status=response.status_code)
            if method == "initialize" and response.headers.get("mcp-session-id"):
                self.session_id = response.headers["mcp-session-id"]
            content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type == "text/event-stream":
                answer = await self._from_stream(response, request_id)
            elif content_type == "application/json":
                body = await response.aread()
                if len(body) > MAX_ANSWER_BYTES:
                    raise McpError("the answer is too large")
                answer = self._pick(_parse(body), request_id)
            else:
                raise McpError(f"unexpected answer type {content_type or 'none'!r}")
        if answer is None:
            raise McpError(f"the server sent no answer to {method}")
        error = answer.get("error")
        if isinstance(error, dict):
            raise McpError(
                str(error.get("message") or "error")[:500],
                code=error.get("code") if isinstance(error.get("code"), int) else None,
            )
        result = answer.get("result")
        if not isinstance(result, dict):
            raise McpError(f"the answer to {method} has no result object")
        return result

    async def _from_stream(
        self, response: httpx.Response, request_id: int
    ) -> dict[str, Any] | None:
        data: list[str] = []
        size = 0
        async for line in response.aiter_lines():
            size += len(line)
            if size > MAX_ANSWER_BYTES:
                raise McpError("the answer is too large")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                continue
            if line or not data:
                continue  # `event:`, `id:`, `retry:`, comments; or a blank line between events
            event, data = "\n".join(data), []
            answer = self._pick(_parse(event.encode()), request_id)
            if answer is not None:
                return answer
        if data:
            return self._pick(_parse("\n".join(data).encode()), request_id)
        return None

    def _pick(self, message: Any, request_id: int) -> dict[str, Any] | None:
        """Our response out of a message or batch; server requests get "method not found"."""
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict):
                continue
            if item.get("id") == request_id and ("result" in item or "error" in item):
                return item
            if "method" in item and "id" in item:
                task = asyncio.get_running_loop().create_task(self._refuse(item["id"]))
                self._refusals.add(task)
                task.add_done_callback(self._refusals.discard)
        return None

    async def _refuse(self, request_id: Any) -> None:
        with contextlib.suppress(Exception):
            await self._http.post(
                self.url,
                json={
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": "not supported by this client"},
                },
                headers=self._headers(),
            )


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise McpError("the answer is not JSON") from None
