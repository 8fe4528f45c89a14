"""The in-sandbox model forwarder: a loopback HTTP listener that tunnels `/gateway/...`
requests to control (over the control Unix socket, or its TCP base URL) and streams each
response back chunk by chunk, so SSE flows token by token.

A sandbox has no network; backends reach the model gateway as
`http://127.0.0.1:<port>/gateway/openai/v1` with the run's grant as API key. The request's
headers go through as they are (control's gateway checks `Authorization: Bearer <grant>`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import posixpath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

if TYPE_CHECKING:  # both imported by the first request: a driver booting makes none
    import h11
    import httpx

log = logging.getLogger("driver.forwarder")

GATEWAY_PREFIX = "/gateway/"
MAX_REQUEST_BODY_BYTES = 32 * 1024 * 1024
_READ_CHUNK = 65536
# Headers that belong to one hop, never forwarded either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)


def upstream_for(control_url: str) -> tuple[str, str | None]:
    """(HTTP base URL, Unix socket path or None) for a boot payload's `control_url`.

    `unix:///run/mosoo/control.sock` -> ("http://control", "/run/mosoo/control.sock");
    `wss://host/prefix/driver/socket` -> ("https://host/prefix", None).
    """
    parts = urlsplit(control_url)
    if parts.scheme == "unix":
        return "http://control", parts.path
    if parts.scheme in ("ws", "wss", "http", "https"):
        scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        path = parts.path.rstrip("/")
        if path.endswith("/driver/socket"):
            path = path[: -len("/driver/socket")]
        return urlunsplit((scheme, parts.netloc, path, "", "")), None
    raise ValueError(f"unsupported control_url scheme {parts.scheme!r}")


def _is_gateway_path(path: str) -> bool:
    """Under /gateway/, also once percent-decoded, with no `..` segment to climb out."""
    decoded = unquote(path)
    return (
        path.startswith(GATEWAY_PREFIX)
        and ".." not in decoded.split("/")
        and posixpath.normpath(decoded).startswith(GATEWAY_PREFIX)
    )


class Forwarder:
    def __init__(
        self, control_url: str, *, traceparent: str = "", host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.upstream_base, self.unix_path = upstream_for(control_url)
        self.traceparent = traceparent
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._client: httpx.AsyncClient | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def gateway_url(self) -> str:
        return f"{self.url}/gateway"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("forwarder_listening", extra={"url": self.url, "upstream": self.upstream_base})

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self._client is not None:
            await self._client.aclose()

    def _upstream(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            transport = (
                httpx.AsyncHTTPTransport(uds=self.unix_path)
                if self.unix_path
                else httpx.AsyncHTTPTransport()
            )
            self._client = httpx.AsyncClient(
                base_url=self.upstream_base,
                transport=transport,
                trust_env=False,
                timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=10.0),
            )
        return self._client

    # --- one client connection -----------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11

        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except h11.ProtocolError as error:
            log.warning("forwarder_bad_request", extra={"error": str(error)})
        except Exception:
            log.exception("forwarder_failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11

        connection = h11.Connection(h11.SERVER)
        while True:
            request = await self._next_event(connection, reader)
            if not isinstance(request, h11.Request):
                return
            body = bytearray()
            while True:
                event = await self._next_event(connection, reader)
                if isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > MAX_REQUEST_BODY_BYTES:
                        await self._send_error(connection, writer, 413, "request body too large")
                        return
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    return
            await self._handle(connection, reader, writer, request, bytes(body))
            if connection.our_state is h11.DONE and connection.their_state is h11.DONE:
                connection.start_next_cycle()
            else:
                return

    async def _next_event(
        self, connection: h11.Connection, reader: asyncio.StreamReader
    ) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        import h11

        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await reader.read(_READ_CHUNK))
                continue
            return event

    async def _handle(
        self,
        connection: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        body: bytes,
    ) -> None:
        target = request.target.decode("latin-1")
        if not _is_gateway_path(target.split("?", 1)[0]):
            await self._send_error(connection, writer, 404, "only /gateway/ paths are forwarded")
            return
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in request.headers
            if name.decode("latin-1").lower() not in HOP_BY_HOP
            and name.lower() != b"content-length"
        ]
        if self.traceparent and not any(name.lower() == "traceparent" for name, _ in headers):
            headers.append(("traceparent", self.traceparent))
        import httpx

        client = self._upstream()
        upstream_request = client.build_request(
            request.method.decode("ascii"), target, headers=headers, content=body
        )
        try:
            response = await client.send(upstream_request, stream=True)
        except httpx.HTTPError as error:
            log.warning("forwarder_upstream_unreachable", extra={"error": str(error)})
            await self._send_error(
                connection, writer, 502, f"control is unreachable: {type(error).__name__}"
            )
            return
        try:
            await self._relay(connection, reader, writer, response)
        except httpx.HTTPError as error:
            # Mid-response: too late for a status, so drop the connection (the client sees it).
            log.warning("forwarder_upstream_broke", extra={"error": str(error)})
            raise ConnectionResetError("the upstream response broke off") from None
        finally:
            await response.aclose()

    async def _relay(
        self,
        connection: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        response: httpx.Response,
    ) -> None:
        import h11

        headers = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in HOP_BY_HOP
        ]
        writer.write(
            connection.send(h11.Response(status_code=response.status_code, headers=headers)) or b""
        )
        await writer.drain()

        async def stream_body() -> None:
            async for chunk in response.aiter_raw():
                if chunk:
                    writer.write(connection.send(h11.Data(data=chunk)) or b"")
                    await writer.drain()
            writer.write(connection.send(h11.EndOfMessage()) or b"")
            await writer.drain()

        async def client_gone() -> None:
            # The client sends nothing while it reads a response: EOF means it went away
            # (a cancelled model stream), and the upstream call must stop with it.
            while data := await reader.read(_READ_CHUNK):
                connection.receive_data(data)

        streaming = asyncio.create_task(stream_body())
        watching = asyncio.create_task(client_gone())
        try:
            done, _ = await asyncio.wait({streaming, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (streaming, watching):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        if streaming in done:
            streaming.result()  # re-raise an upstream failure: the connection is then dropped
        else:
            log.info("forwarder_client_gone")
            raise ConnectionResetError("the client closed the connection mid-response")

    async def _send_error(
        self, connection: h11.Connection, writer: asyncio.StreamWriter, status: int, message: str
    ) -> None:
        import h11

        body = json.dumps(
            {"error": {"code": "forwarder_error", "message": message, "type": "forwarder_error"}}
        ).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        writer.write(connection.send(h11.Response(status_code=status, headers=headers)) or b"")
        writer.write(connection.send(h11.Data(data=body)) or b"")
        writer.write(connection.send(h11.EndOfMessage()) or b"")
        await writer.drain()
