"""`web_fetch` against loopback servers: an origin (HTTP, and HTTPS with a self-signed
certificate the tool trusts through `SSL_CERT_FILE`) and a small forward proxy that stands in
for the sandbox's proxy to Mosoo's egress proxy. Like that one, it answers a host that is not
loopback with `403` + `X-Mosoo-Egress: refused` (and connects to nothing but 127.0.0.1), so
no test traffic ever leaves the machine."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from driver.backends.openai import OpenAIBackend
from driver.tools import ToolContext, builtin_tools
from driver.tools.web_fetch import MAX_CHARS_LIMIT, NO_NETWORK, WebFetchTool, html_to_markdown
from tests.driver.conftest import RecordingSink, command, make_spec, wait_for
from tests.support.certificates import self_signed
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn, ToolCall, ToolCallsTurn

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
LOOPBACK = {"127.0.0.1", "localhost"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
BIG_BYTES = 6 * 1024 * 1024

PAGE = """<!doctype html>
<html><head><title>The  Test Page</title><style>body { color: red }</style>
<script>console.log("script text must not show")</script></head>
<body>
<nav><a href="/home">Home</a></nav>
<h1>Main heading</h1>
<p>Some <b>bold</b> text with snake_case and a <a href="docs/guide.html">relative link</a>.</p>
<ul><li>first item</li><li>second item</li></ul>
<img src="data:image/png;base64,AAAA" alt="inline picture">
<table><tr><th>Name</th><th>Value</th></tr><tr><td>alpha</td><td>1</td></tr></table>
</body></html>
"""


# --- servers -----------------------------------------------------------------------------


class Origin(BaseHTTPRequestHandler):
    """Routes for every case; `server.hits` records the paths asked for."""

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        path = self.path
        if path == "/page.html":
            self._send(200, PAGE.encode(), "text/html; charset=utf-8")
        elif path == "/doc.json":
            body = json.dumps({"name": "mosoo", "tools": ["web_fetch"]}, indent=2).encode()
            self._send(200, body, "application/json")
        elif path == "/long.txt":
            self._send(200, b"".join(b"line %06d\n" % i for i in range(20_000)), "text/plain")
        elif path == "/big.txt":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(BIG_BYTES))
            self.end_headers()
            chunk = b"x" * 65535 + b"\n"
            with_sent = 0
            try:
                while with_sent < BIG_BYTES:
                    self.wfile.write(chunk)
                    with_sent += len(chunk)
            except OSError:
                pass  # the tool stopped reading, as it should
        elif path.startswith("/redirect/"):
            left = int(path.rsplit("/", 1)[1])
            target = f"/redirect/{left - 1}" if left > 1 else "/page.html"
            self._send(302, b"", "text/plain", Location=target)
        elif path == "/to-evil":
            self._send(302, b"", "text/plain", Location="http://evil.example/stolen")
        elif path == "/to-file":
            self._send(302, b"", "text/plain", Location="file:///etc/passwd")
        elif path == "/image.png":
            self._send(200, PNG, "image/png")
        elif path == "/untyped":
            self._send(200, PNG, None)
        elif path == "/latin1.txt":
            self._send(200, "café déjà vu".encode("latin-1"), "text/plain; charset=iso-8859-1")
        elif path == "/meta-charset.html":
            body = '<html><head><meta charset="windows-1252"></head><body><p>naïve</p></body>'
            self._send(200, body.encode("cp1252"), "text/html")
        elif path == "/missing":
            self._send(404, b"<html><body><h1>Nothing here</h1></body></html>", "text/html")
        elif path == "/broken":
            self._send(500, b"database is down", "text/plain")
        elif path == "/slow":
            time.sleep(3)
            self._send(200, b"late", "text/plain")
        else:
            self._send(404, b"no route", "text/plain")


class OriginServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Origin)
        self.hits: list[str] = []
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.base_url = f"{scheme}://127.0.0.1:{self.server_address[1]}"


def _relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class ProxyHandler(socketserver.StreamRequestHandler):
    """A forward proxy: CONNECT tunnels and absolute-form requests, only to loopback."""

    def _refuse(self, status: int, body: str, *, refused: bool) -> None:
        payload = body.encode() + b"\n"
        head = [
            f"HTTP/1.1 {status} {'Forbidden' if status == 403 else 'Bad Gateway'}",
            "Content-Type: text/plain; charset=utf-8",
            f"Content-Length: {len(payload)}",
            "Connection: close",
        ]
        if refused:
            head.append("X-Mosoo-Egress: refused")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)

    def _denied(self, host: str, port: int) -> bool:
        if host == "unreachable.example":
            self._refuse(502, f"egress failed: dns_failed ({host}:{port})", refused=False)
            return True
        if host not in LOOPBACK:
            self._refuse(403, f"egress refused: not_allowed ({host}:{port})", refused=True)
            return True
        return False

    def handle(self) -> None:
        proxy: ProxyServer = self.server  # type: ignore[assignment]
        line = self.rfile.readline(65536).decode("latin-1").rstrip("\r\n")
        headers: list[str] = []
        while (header := self.rfile.readline(65536).decode("latin-1").rstrip("\r\n")) != "":
            headers.append(header)
        method, target, _version = line.split(" ", 2)
        proxy.seen.append(f"{method} {target}")
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            if self._denied(host, int(port)):
                return
            upstream = socket.create_connection(("127.0.0.1", int(port)))
            self.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            self.wfile.flush()
            back = threading.Thread(target=_relay, args=(upstream, self.connection), daemon=True)
            back.start()
            _relay(self.connection, upstream)
            back.join(timeout=5)
            return
        parts = urlsplit(target)
        port = parts.port or 80
        if self._denied(parts.hostname or "", port):
            return
        kept = [h for h in headers if h.split(":", 1)[0].strip().lower() not in HOP]
        request = [f"{method} {parts.path or '/'} HTTP/1.1", *kept, "Connection: close"]
        with socket.create_connection(("127.0.0.1", port)) as upstream:
            upstream.sendall(("\r\n".join(request) + "\r\n\r\n").encode("latin-1"))
            try:
                while data := upstream.recv(65536):
                    self.wfile.write(data)
            except OSError:
                pass


HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization"}


class ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.seen: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


def _serve(server: socketserver.BaseServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost: (cert.pem, key.pem)."""
    made = self_signed("localhost", "127.0.0.1")
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(made.cert_pem)
    key_path.write_bytes(made.key_pem)
    return cert_path, key_path


@pytest.fixture
def origin() -> Iterator[OriginServer]:
    yield from _serve(OriginServer())


@pytest.fixture
def tls_origin(certificate: tuple[Path, Path]) -> Iterator[OriginServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    yield from _serve(OriginServer(context))


@pytest.fixture
def proxy() -> Iterator[ProxyServer]:
    yield from _serve(ProxyServer())


@pytest.fixture(autouse=True)
def no_proxy_in_the_test_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test puts in the context counts (CI machines may have proxies set)."""
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def context(tmp_path: Path, proxy: ProxyServer, certificate: tuple[Path, Path]) -> ToolContext:
    return ToolContext(
        workspace=tmp_path,
        environment={
            "HTTP_PROXY": proxy.url,
            "HTTPS_PROXY": proxy.url,
            "SSL_CERT_FILE": str(certificate[0]),
        },
    )


async def fetch(
    context: ToolContext, url: str, tool: WebFetchTool | None = None, **extra: Any
) -> tuple[str, bool]:
    result = await (tool or WebFetchTool()).run({"url": url, **extra}, context)
    return result.output, result.is_error


# --- the tool ----------------------------------------------------------------------------


def test_web_fetch_is_a_builtin_tool_with_a_url_schema() -> None:
    tool = builtin_tools()["web_fetch"]
    schema = tool.schema()["function"]
    assert schema["name"] == "web_fetch"
    assert schema["parameters"]["required"] == ["url"]
    assert set(schema["parameters"]["properties"]) == {"url", "max_chars"}
    assert "network policy" in schema["description"]


async def test_an_html_page_comes_back_as_markdown_with_the_url_and_status_on_top(
    context: ToolContext, origin: OriginServer, proxy: ProxyServer
) -> None:
    url = f"{origin.base_url}/page.html"
    output, is_error = await fetch(context, url)
    assert not is_error, output
    lines = output.splitlines()
    assert lines[0] == f"URL: {url}"
    assert lines[1] == "HTTP/1.0 200 OK"
    assert "Content-Type: text/html; charset=utf-8" in lines
    assert "Title: The Test Page" in lines
    assert "# Main heading" in output
    assert "Some **bold** text with snake_case and a " in output
    assert f"[relative link]({origin.base_url}/docs/guide.html)" in output
    assert "- first item\n- second item" in output
    assert "| Name | Value |" in output and "| alpha | 1 |" in output
    assert "inline picture" in output and "data:image" not in output
    assert "script text" not in output and "color: red" not in output
    assert proxy.seen == [f"GET {url}"]  # through the proxy, in absolute form


async def test_https_goes_through_a_connect_tunnel_and_verifies_the_certificate(
    context: ToolContext, tls_origin: OriginServer, proxy: ProxyServer
) -> None:
    url = f"{tls_origin.base_url}/doc.json"
    output, is_error = await fetch(context, url)
    assert not is_error, output
    assert output.splitlines()[0] == f"URL: {url}"
    body = output.split("\n\n", 1)[1]
    assert json.loads(body) == {"name": "mosoo", "tools": ["web_fetch"]}
    assert proxy.seen == [f"CONNECT 127.0.0.1:{urlsplit(url).port}"]


async def test_an_untrusted_certificate_is_refused(
    context: ToolContext, tls_origin: OriginServer
) -> None:
    context.environment.pop("SSL_CERT_FILE")  # certifi's bundle does not know our test CA
    output, is_error = await fetch(context, f"{tls_origin.base_url}/doc.json")
    assert is_error
    assert output.startswith("The TLS connection to 127.0.0.1 failed: CERTIFICATE_VERIFY_FAILED")
    assert tls_origin.hits == []


async def test_json_and_text_come_back_as_they_are_decoded_by_their_charset(
    context: ToolContext, origin: OriginServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/doc.json")
    assert not is_error
    assert output.endswith(json.dumps({"name": "mosoo", "tools": ["web_fetch"]}, indent=2))
    output, is_error = await fetch(context, f"{origin.base_url}/latin1.txt")
    assert not is_error and output.endswith("\n\ncafé déjà vu")
    output, is_error = await fetch(context, f"{origin.base_url}/meta-charset.html")
    assert not is_error and output.endswith("\n\nnaïve")


async def test_long_content_is_truncated_with_a_marker(
    context: ToolContext, origin: OriginServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/long.txt", max_chars=1000)
    assert not is_error
    _header, content, note = output.split("\n\n")
    assert content == "".join(f"line {i:06d}\n" for i in range(91))[:1000]
    assert note == (
        "[truncated at 1000 characters of 240000; call again with a larger max_chars "
        f"(at most {MAX_CHARS_LIMIT}) to see more]"
    )
    default, _ = await fetch(context, f"{origin.base_url}/long.txt")
    assert "[truncated at 20000 characters of 240000;" in default


async def test_max_chars_is_capped_and_the_output_is_not_cut_in_the_middle(
    context: ToolContext, origin: OriginServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/long.txt", max_chars=10**9)
    assert not is_error
    assert output.endswith(f"[truncated at {MAX_CHARS_LIMIT} characters of 240000]")
    assert "output truncated" not in output  # the generic head-and-tail cut did not apply
    assert "line 008332" in output and "line 008334" not in output


async def test_a_download_stops_at_the_size_limit_and_says_so(
    context: ToolContext, origin: OriginServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/big.txt", max_chars=500)
    assert not is_error
    assert "[download stopped at 5.0 MiB: the rest of the response was not read]" in output
    assert f"[truncated at 500 characters of {5 * 1024 * 1024};" in output


def test_a_large_html_page_is_converted_only_as_far_as_it_is_shown() -> None:
    html = "<html><body>" + "".join(f"<p>Paragraph {i}.</p>" for i in range(20_000)) + "</body>"
    text, title, goes_on = html_to_markdown(html, "http://x/", 1000)
    assert goes_on and title is None
    assert text.startswith("Paragraph 0.\n\nParagraph 1.") and len(text) >= 1000
    assert "Paragraph 19999." not in text


async def test_redirects_are_followed_through_the_proxy_and_named(
    context: ToolContext, origin: OriginServer, proxy: ProxyServer
) -> None:
    start = f"{origin.base_url}/redirect/3"
    output, is_error = await fetch(context, start)
    assert not is_error, output
    assert output.splitlines()[0] == f"URL: {origin.base_url}/page.html"
    assert (
        f"Redirected from: {start} -> {origin.base_url}/redirect/2 -> "
        f"{origin.base_url}/redirect/1" in output
    )
    assert "# Main heading" in output
    assert proxy.seen == [
        f"GET {origin.base_url}/redirect/3",
        f"GET {origin.base_url}/redirect/2",
        f"GET {origin.base_url}/redirect/1",
        f"GET {origin.base_url}/page.html",
    ]


async def test_more_than_five_redirects_are_not_followed(
    context: ToolContext, origin: OriginServer, proxy: ProxyServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/redirect/5")
    assert not is_error  # 5 redirects are fine
    output, is_error = await fetch(context, f"{origin.base_url}/redirect/6")
    assert is_error
    assert output.startswith(
        f"Stopped after 5 redirects: {origin.base_url}/redirect/1 redirects again, to /page.html."
    )
    assert origin.hits.count("/page.html") == 1  # only the first fetch got there


async def test_a_redirect_to_a_host_the_policy_refuses_is_refused_at_that_hop(
    context: ToolContext, origin: OriginServer, proxy: ProxyServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/to-evil")
    assert is_error
    assert output == (
        "The network policy refused evil.example:80: not_allowed. "
        "Allowed hosts are set on the Agent's environment."
    )
    assert proxy.seen[-1] == "GET http://evil.example/stolen"
    output, is_error = await fetch(context, f"{origin.base_url}/to-file")
    assert is_error and "file:///etc/passwd, which is not an http(s) URL" in output


async def test_a_host_the_policy_refuses_over_http(context: ToolContext) -> None:
    output, is_error = await fetch(context, "http://evil.example/page")
    assert is_error
    assert output == (
        "The network policy refused evil.example:80: not_allowed. "
        "Allowed hosts are set on the Agent's environment."
    )


async def test_a_host_the_policy_refuses_over_https_as_a_failed_connect(
    context: ToolContext, proxy: ProxyServer
) -> None:
    output, is_error = await fetch(context, "https://evil.example/page")
    assert is_error
    assert output == (
        "The network policy refused evil.example:443: not_allowed. "
        "Allowed hosts are set on the Agent's environment."
    )
    assert proxy.seen == ["CONNECT evil.example:443"]


async def test_a_proxy_that_cannot_reach_the_host_says_why(context: ToolContext) -> None:
    output, is_error = await fetch(context, "https://unreachable.example/")
    assert is_error
    assert output == (
        "The proxy could not open a connection to unreachable.example:443: 502 Bad Gateway: "
        "egress failed: dns_failed (unreachable.example:443)"
    )
    output, is_error = await fetch(context, "http://unreachable.example/")
    assert is_error
    assert "HTTP/1.1 502 Bad Gateway" in output and "egress failed: dns_failed" in output


async def test_without_a_proxy_the_sandbox_has_no_network(
    tmp_path: Path, origin: OriginServer
) -> None:
    context = ToolContext(workspace=tmp_path)
    for url in (f"{origin.base_url}/page.html", "https://example.com/"):
        output, is_error = await fetch(context, url)
        assert is_error
        assert output == NO_NETWORK
        assert output == 'This sandbox has no network access (environment network policy "none").'
    assert origin.hits == []  # nothing went anywhere directly


async def test_an_unreachable_proxy_is_named(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = ToolContext(
        workspace=tmp_path,
        environment={"HTTPS_PROXY": f"http://user:secret@127.0.0.1:{port}"},
    )
    for url in ("https://example.com/", "http://example.com/"):
        output, is_error = await fetch(context, url)
        assert is_error
        assert output.startswith(
            f"Could not reach the sandbox's network proxy at http://127.0.0.1:{port}: "
        ), output
        assert "secret" not in output


async def test_a_broken_proxy_or_certificate_setting_is_named(
    tmp_path: Path, proxy: ProxyServer
) -> None:
    context = ToolContext(workspace=tmp_path, environment={"HTTPS_PROXY": "socks5://127.0.0.1:1"})
    output, is_error = await fetch(context, "https://example.com/")
    assert is_error and "is not an http://host:port URL" in output
    context = ToolContext(
        workspace=tmp_path,
        environment={"HTTPS_PROXY": proxy.url, "SSL_CERT_FILE": str(tmp_path / "missing.pem")},
    )
    output, is_error = await fetch(context, "https://example.com/")
    assert is_error and output.startswith("The trusted certificates (SSL_CERT_FILE")
    assert proxy.seen == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/file", "javascript:alert(1)", "example.com"]
)
async def test_only_http_and_https_urls_are_fetched(
    context: ToolContext, proxy: ProxyServer, url: str
) -> None:
    output, is_error = await fetch(context, url)
    assert is_error
    assert output.startswith("invalid input for web_fetch: only http:// and https:// URLs")
    assert proxy.seen == []


async def test_bad_input_is_an_error_result(context: ToolContext) -> None:
    output, is_error = await fetch(context, "http://")
    assert is_error and "has no host" in output
    output, is_error = await fetch(context, "http://example.com/", max_chars=0)
    assert is_error and "max_chars" in output
    result = await WebFetchTool().run({}, context)
    assert result.is_error and "`url` is required" in result.output


async def test_binary_content_is_refused_by_its_type(
    context: ToolContext, origin: OriginServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/image.png")
    assert is_error
    assert output == (
        f"{origin.base_url}/image.png is image/png content (72 bytes), which web_fetch does "
        "not read: it returns HTML, text and JSON only."
    )
    output, is_error = await fetch(context, f"{origin.base_url}/untyped")
    assert is_error and "is binary content (no Content-Type given)" in output


async def test_http_errors_come_back_with_their_status_and_a_short_excerpt(
    context: ToolContext, origin: OriginServer
) -> None:
    output, is_error = await fetch(context, f"{origin.base_url}/missing")
    assert is_error
    assert "HTTP/1.0 404 Not Found" in output
    assert output.endswith("\n\n# Nothing here")
    output, is_error = await fetch(context, f"{origin.base_url}/broken")
    assert is_error
    assert "HTTP/1.0 500 Internal Server Error" in output
    assert output.endswith("\n\ndatabase is down")


async def test_a_slow_server_times_out(context: ToolContext, origin: OriginServer) -> None:
    started = time.monotonic()
    output, is_error = await fetch(
        context, f"{origin.base_url}/slow", tool=WebFetchTool(total_timeout=0.5)
    )
    assert is_error
    assert output == f"Fetching {origin.base_url}/slow timed out after 0.5 s."
    assert time.monotonic() - started < 2.5


# --- through the runtime -----------------------------------------------------------------


async def test_an_agent_whose_policy_enables_web_fetch_asks_then_fetches(
    tmp_path: Path, origin: OriginServer, proxy: ProxyServer
) -> None:
    url = f"{origin.base_url}/doc.json"
    workspace = tmp_path / "workspace"
    with ScriptedOpenAIServer() as model_server:
        model_server.add(
            ToolCallsTurn([ToolCall("web_fetch", {"url": url}, id="call_fetch")]),
            TextTurn("Fetched."),
        )
        sink = RecordingSink()
        spec = make_spec(
            workspace,
            tools={"web_fetch": "ask"},
            environment={"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url},
        )
        backend = OpenAIBackend(spec, sink, model_base_url=model_server.base_url, max_retries=0)
        await backend.start()
        try:
            await backend.handle_command(
                command("input.start", {"run_id": "run-1", "text": "Fetch it", "attachments": []})
            )
            await wait_for(lambda: "permission.requested" in sink.kinds(), what="the question")
            request = sink.of_kind("permission.requested")[0]
            assert request["name"] == "web_fetch" and request["input"] == {"url": url}
            await backend.handle_command(
                command(
                    "permission.resolve",
                    {"request_id": request["request_id"], "decision": "allow_once"},
                )
            )
            await wait_for(lambda: "run.completed" in sink.kinds(), what="the end of the run")
        finally:
            await backend.close()
        tools = model_server.chat_requests[0].body["tools"]
        assert [t["function"]["name"] for t in tools] == ["web_fetch"]
        completed = sink.of_kind("tool.call.completed")[0]
        assert completed["is_error"] is False
        assert completed["output"].startswith(f"URL: {url}\nHTTP/1.0 200 OK")
        assert proxy.seen == [f"GET {url}"]
