"""A page on another loopback port (another origin, but the same site, so the browser sends
the owner's SameSite=Lax cookie along) can neither drive the console's websocket nor sign
the owner out; the console's own pages keep working."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import WebServer
from tests.browser.test_console_journey import _sign_in
from tests.support.processes import free_port

pytestmark = pytest.mark.browser

# Opens the console's websocket the way Reflex's client does; says whether it opened and
# what the first message was (Engine.IO's open packet, `0{"sid": ...}`, when accepted).
PROBE = """
(url) => new Promise((resolve) => {
  const result = {opened: false, message: null};
  const socket = new WebSocket(url);
  socket.onopen = () => { result.opened = true; };
  socket.onmessage = (event) => { result.message = String(event.data); socket.close(); resolve(result); };
  socket.onclose = () => resolve(result);
  setTimeout(() => resolve(result), 15000);
})
""".strip()

# The other site's page: on load it tries the websocket, then a no-cors sign-out POST (no
# preflight, the cookie rides along), and reports both in #report.
FOREIGN_PAGE = """<!doctype html><title>Elsewhere</title><h1>Another site</h1><pre id="report"></pre>
<script>
const probe = {probe};
probe({socket_url}).then(async (socket) => {{
  let logout = "sent";
  try {{
    await fetch({logout_url}, {{method: "POST", credentials: "include", mode: "no-cors"}});
  }} catch (error) {{
    logout = "failed: " + error;
  }}
  document.getElementById("report").textContent = JSON.stringify({{socket, logout}});
}});
</script>
"""


@contextlib.contextmanager
def foreign_site(page: bytes) -> Iterator[str]:
    """A tiny HTTP server on another loopback port serving one page."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, name="foreign-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_another_port_cannot_use_the_owners_cookie_on_the_websocket_or_to_sign_out(
    page: Page, browser: Browser, web_server: WebServer
) -> None:
    page.goto(f"{web_server.url}/")
    page.wait_for_url(re.compile(r"/login"))
    _sign_in(page, browser, web_server, f"origin-{uuid.uuid4().hex[:8]}@example.com")
    page.wait_for_url(re.compile(r"/apps/[0-9A-Z]{26}$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Default App")
    app_url = page.url
    socket_url = (
        web_server.url.replace("http://", "ws://")
        + "/_event/?EIO=4&transport=websocket&token="
        + uuid.uuid4().hex
    )
    html = FOREIGN_PAGE.format(
        probe=PROBE,
        socket_url=json.dumps(socket_url),
        logout_url=json.dumps(f"{web_server.url}/api/auth/logout"),
    )

    with foreign_site(html.encode()) as foreign_url:
        assert (
            foreign_url != web_server.url
        )  # another port of 127.0.0.1: another origin, the same site
        foreign = page.context.new_page()
        foreign.goto(foreign_url)
        report = foreign.locator("#report")
        expect(report).not_to_be_empty(timeout=30_000)
        outcome = json.loads(report.inner_text())
        foreign.close()

    # The handshake carried the owner's cookie, but its Origin is not the console's.
    assert outcome["socket"] == {"opened": False, "message": None}, outcome
    # The sign-out request went out and was refused: the session lives on.
    assert outcome["logout"] == "sent", outcome
    me = page.context.request.get(f"{web_server.url}/api/auth/me")
    assert me.status == 200, me.text()

    # The console itself still connects: the same raw handshake from its own origin opens,
    # and a signed-in page hydrates and shows the owner's App.
    own = page.evaluate(PROBE, socket_url)
    assert own["opened"] is True and str(own["message"]).startswith("0{"), own
    page.goto(app_url)
    expect(page.get_by_test_id("page-title")).to_have_text("Default App")
    assert page.url == app_url
