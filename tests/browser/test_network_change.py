"""The suite's Chromium keeps loading pages while the host's network interfaces change.

Docker adds a veth pair for every sandbox the other pytest worker starts. Chromium, when it
notices an interface address come or go, fails every request still waiting for a connection
with ERR_NETWORK_CHANGED, loopback included, and a console page caught loading its scripts
never started (tests/support/no_netlink.c). Here a veth pair comes and goes while a page
loads 30 slow scripts: a plain Chromium loses some of them (which shows the change is seen),
the suite's Chromium loses none.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Browser

from tests.support import chromium

SCRIPTS = 30


class _SlowScripts(BaseHTTPRequestHandler):
    """Each test's subclass has its own `first_script` (set when the first script is asked
    for) and `served` (when each script's answer went out)."""

    protocol_version = "HTTP/1.1"
    first_script: threading.Event
    served: list[float]

    def do_GET(self) -> None:
        script = self.path != "/"
        if script:
            type(self).first_script.set()
            time.sleep(0.3)  # Chromium opens 6 connections a host: the rest wait for one
            body = b"window.loaded = (window.loaded || 0) + 1;"
        else:
            body = "".join(f"<script src='/{n}.js'></script>" for n in range(SCRIPTS)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if script:
            type(self).served.append(time.monotonic())

    def log_message(self, *args: object) -> None:
        pass


@dataclass(frozen=True)
class SlowPage:
    url: str
    first_script: threading.Event
    served: list[float]


@pytest.fixture
def slow_page() -> Iterator[SlowPage]:
    class Handler(_SlowScripts):
        first_script = threading.Event()
        served: list[float] = []

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SlowPage(
            f"http://127.0.0.1:{server.server_address[1]}/", Handler.first_script, Handler.served
        )
    finally:
        server.shutdown()
        server.server_close()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _interface_churn(started: threading.Event, name: str) -> float:
    """Once the page's scripts are loading, a veth pair with an address comes and goes, as
    Docker's does for a sandbox. No IPv6 link-local address and no route off the host: the
    pair only exists, nothing is sent on it. Returns when the address came."""
    started.wait(10)
    _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
    try:
        _ip("link", "set", name, "addrgenmode", "none")
        _ip("link", "set", f"{name}p", "addrgenmode", "none")
        _ip("addr", "add", "192.0.2.1/32", "dev", name)  # TEST-NET-1: routes nowhere real
        added = time.monotonic()
        _ip("link", "set", name, "up")
        _ip("link", "set", f"{name}p", "up")
        time.sleep(0.2)
    finally:
        _ip("link", "del", name)
    return added


def _load_during_churn(browser: Browser, slow: SlowPage) -> tuple[int, list[str]]:
    page = browser.new_page()
    failures: list[str] = []
    page.on("requestfailed", lambda request: failures.append(request.failure or "?"))
    with ThreadPoolExecutor(1) as pool:
        churn = pool.submit(_interface_churn, slow.first_script, f"mnl{os.getpid() % 100000}")
        try:
            page.goto(slow.url)
            loaded = page.evaluate("window.loaded || 0")
        finally:
            added = churn.result()  # the interface really came and went (or why it could not)
            page.close()
    # The change came while scripts were still being served, or the load proved nothing.
    assert slow.served and added < max(slow.served), "the interface changed after the load"
    return loaded, failures


def test_a_plain_chromium_fails_loads_when_an_interface_changes(
    browser: Browser, slow_page: SlowPage
) -> None:
    plain = chromium.launch(browser.browser_type, no_netlink=None)
    try:
        loaded, failures = _load_during_churn(plain, slow_page)
    finally:
        plain.close()
    assert loaded < SCRIPTS
    assert "net::ERR_NETWORK_CHANGED" in failures


def test_the_suites_chromium_loads_every_script_while_an_interface_changes(
    browser: Browser, slow_page: SlowPage
) -> None:
    loaded, failures = _load_during_churn(browser, slow_page)
    assert failures == []
    assert loaded == SCRIPTS
