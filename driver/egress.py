"""The in-sandbox end of the `limited` network: a loopback listener that tunnels every
connection to control's egress proxy (a Unix socket beside the control socket).

A `limited` sandbox has no network at all; its processes reach the outside only through
`HTTP_PROXY` / `HTTPS_PROXY`, which point here. Each connection is spliced as it is to the
proxy after one preamble line, `MOSOO-EGRESS <grant>`: the run's grant is what control
looks the run's frozen allowlist up by, so nothing a process in the sandbox sends can
change which hosts it may reach (control decides every request and CONNECT itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import IO
from urllib.parse import urlsplit

from driver.protocol import EGRESS_GRANT_ENV, EGRESS_SOCKET_ENV

log = logging.getLogger("driver.egress")

EGRESS_SOCKET_NAME = "egress.sock"
DEFAULT_EGRESS_SOCKET = f"/run/mosoo/control/{EGRESS_SOCKET_NAME}"
_CHUNK = 65536


def egress_socket_for(control_url: str) -> str | None:
    """The egress socket beside a `unix://` control socket; None for a remote control (a
    sandbox dialling control over TCP has no egress tunnel yet, so it keeps no network)."""
    parts = urlsplit(control_url)
    if parts.scheme != "unix":
        return None
    return str(PurePosixPath(parts.path).parent / EGRESS_SOCKET_NAME)


def proxy_environment(url: str) -> dict[str, str]:
    """The variables that send a sandbox's HTTP clients (curl, pip, npm, Python, Node) to
    the listener at `url`."""
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "npm_config_proxy": url,
        "npm_config_https_proxy": url,
    }


class EgressForwarder:
    def __init__(self, socket_path: str, grant: str, *, host: str = "127.0.0.1") -> None:
        self.socket_path = socket_path
        self._preamble = f"MOSOO-EGRESS {grant}\r\n".encode()
        self.host = host
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("egress_listening", extra={"url": self.url})

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._tunnel(reader, writer)
        finally:
            if task is not None:
                self._connections.discard(task)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError as error:
            log.warning("egress_unreachable", extra={"error": type(error).__name__})
            writer.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                b"Content-Length: 39\r\n\r\negress failed: the proxy is unreachable"
            )
            with contextlib.suppress(OSError):
                await writer.drain()
            writer.close()
            return
        up_writer.write(self._preamble)
        await asyncio.gather(
            _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
        )
        for end in (writer, up_writer):
            end.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        # Half-close so the other side sees the end of this direction; close once both end.
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()
            else:
                sink.close()


# --- a command with the tunnel (setup scripts and builds run before any driver) -----------


async def run_with_egress(
    commands: Sequence[Sequence[str]],
    *,
    socket_path: str,
    grant: str,
    env: Mapping[str, str],
    stdout: IO[str] | None = None,
    before_each: Callable[[Sequence[str]], object] | None = None,
) -> int:
    """Run `commands` one after the other, each with the proxy variables pointing at a
    listener that lives exactly as long as they do; stop at the first that fails. Returns
    the last exit status (127 when a program is missing)."""
    forwarder = EgressForwarder(socket_path, grant)
    await forwarder.start()
    child_env = {
        k: v for k, v in env.items() if k not in (EGRESS_GRANT_ENV, EGRESS_SOCKET_ENV)
    } | proxy_environment(forwarder.url)
    status = 0
    try:
        for argv in commands:
            if before_each is not None:
                before_each(argv)
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    env=child_env,
                    stdin=asyncio.subprocess.DEVNULL if stdout is not None else None,
                    stdout=stdout,
                    stderr=asyncio.subprocess.STDOUT if stdout is not None else None,
                )
            except FileNotFoundError:
                if stdout is not None:
                    stdout.write(f"{argv[0]}: command not found\n")
                return 127
            status = await process.wait()
            if status != 0:
                return status
    finally:
        await forwarder.close()
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m driver.egress COMMAND...`: run one command (its stdin and output are this
    process's) with the tunnel; the grant comes from MOSOO_EGRESS_GRANT, never from argv."""
    args = list(sys.argv[1:] if argv is None else argv)
    grant = os.environ.get(EGRESS_GRANT_ENV, "")
    if not args or not grant:
        print(f"usage: {EGRESS_GRANT_ENV}=... python -m driver.egress COMMAND...", file=sys.stderr)
        return 2
    socket_path = os.environ.get(EGRESS_SOCKET_ENV, DEFAULT_EGRESS_SOCKET)
    return asyncio.run(
        run_with_egress([args], socket_path=socket_path, grant=grant, env=dict(os.environ))
    )


if __name__ == "__main__":
    raise SystemExit(main())
