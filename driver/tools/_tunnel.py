"""web_fetch's https:// transport: every connection a CONNECT tunnel through the sandbox's
proxy that we open ourselves, because httpcore's drops the headers and body of a refused
CONNECT, and those say why (`X-Mosoo-Egress: refused`). Apart from web_fetch.py so that httpx
and httpcore are imported by the first fetch, not by every driver.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
from typing import Any
from urllib.parse import unquote

import httpcore
import httpx

_CONNECT_HEAD_LIMIT = 64 * 1024
CONNECT_BODY_LIMIT = 4096


class ProxyAnswer(Exception):
    """The proxy answered a CONNECT with something other than 2xx (its head and body)."""

    def __init__(
        self, target: str, status: int, reason: str, headers: dict[str, str], body: str
    ) -> None:
        super().__init__(f"CONNECT {target}: {status} {reason}".rstrip())
        self.target = target
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


class ProxyUnreachable(Exception):
    """The sandbox's proxy listener itself could not be reached."""

    def __init__(self, proxy: str, error: Exception) -> None:
        super().__init__(f"the proxy is unreachable: {error or type(error).__name__}")
        self.proxy = proxy
        self.error = error


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _ConnectTunnel(httpcore.AsyncNetworkBackend):
    """A network backend whose every TCP connection is a CONNECT tunnel through `proxy`; on
    a refusal it raises ProxyAnswer with the proxy's status, headers and (short) body."""

    def __init__(self, proxy: httpx.URL) -> None:
        self.proxy = proxy
        self.inner = httpcore.AnyIOBackend()
        self.authorization: bytes | None = None
        if proxy.username or proxy.password:
            userinfo = f"{unquote(proxy.username)}:{unquote(proxy.password)}".encode()
            self.authorization = b"Basic " + base64.b64encode(userinfo)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        proxy_port = self.proxy.port or (443 if self.proxy.scheme == "https" else 80)
        try:
            stream = await self.inner.connect_tcp(
                self.proxy.host, proxy_port, timeout, local_address, socket_options
            )
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
            raise ProxyUnreachable(str(self.proxy), error) from error
        target = authority(host, port)
        try:
            head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n".encode()
            if self.authorization is not None:
                head += b"Proxy-Authorization: " + self.authorization + b"\r\n"
            await stream.write(head + b"\r\n", timeout)
            status, reason, headers, rest = await _read_connect_answer(stream, timeout)
            if 200 <= status < 300:
                if rest:
                    raise httpcore.ProxyError("the proxy sent data before the tunnel opened")
                return stream
            body = await _read_short_body(stream, headers, rest, timeout)
            raise ProxyAnswer(target, status, reason, headers, body)
        except httpcore.ReadTimeout as error:
            # The proxy opens the upstream connection before it answers: a connect time.
            await stream.aclose()
            raise httpcore.ConnectTimeout(str(error)) from error
        except BaseException:
            await stream.aclose()
            raise

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("web_fetch does not use Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def _read_connect_answer(
    stream: httpcore.AsyncNetworkStream, timeout: float | None
) -> tuple[int, str, dict[str, str], bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > _CONNECT_HEAD_LIMIT:
            raise httpcore.ProxyError("the proxy's answer to CONNECT is too long")
        chunk = await stream.read(65536, timeout)
        if not chunk:
            raise httpcore.ProxyError("the proxy closed the connection without answering CONNECT")
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise httpcore.ProxyError(f"the proxy answered CONNECT with {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip():
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers, rest


async def _read_short_body(
    stream: httpcore.AsyncNetworkStream,
    headers: dict[str, str],
    rest: bytes,
    timeout: float | None,
) -> str:
    """The first few KiB of a refused CONNECT's body (up to Content-Length, or EOF)."""
    length = headers.get("content-length", "")
    wanted = min(int(length), CONNECT_BODY_LIMIT) if length.isdigit() else CONNECT_BODY_LIMIT
    body = rest
    with contextlib.suppress(httpcore.ReadTimeout, httpcore.ReadError):
        while len(body) < wanted:
            chunk = await stream.read(65536, min(timeout or 5.0, 5.0))
            if not chunk:
                break
            body += chunk
    return body[:wanted].decode("utf-8", errors="replace")


class TunnelTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (its request/response mapping and exception translation) over a
    connection pool whose connections are our CONNECT tunnels."""

    def __init__(self, proxy: httpx.URL, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, network_backend=_ConnectTunnel(proxy)
        )
