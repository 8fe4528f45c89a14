"""A web page on loopback: `with LoopbackPage("allowed") as page:` serves, at any path,
`<h1>Hello from allowed</h1>` on 127.0.0.1:`page.port` (what sandboxes fetch through the
egress proxy in the tests)."""

from __future__ import annotations

import http.server
import threading
from typing import Self


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        name = self.server.name  # type: ignore[attr-defined]
        data = f"<html><title>Served</title><body><h1>Hello from {name}</h1></body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class LoopbackPage:
    def __init__(self, name: str) -> None:
        self.name = name
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
        self._server.name = name  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]

    def __enter__(self) -> Self:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
