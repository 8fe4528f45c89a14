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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Browser

from tests.support import chromium

SCRIPTS = 30


class _SlowScripts(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    first_script = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/":
            body = "".join(f"<script src='/{n}.js'></script>" for n in range(SCRIPTS)).encode()
        else:
            type(self).first_script.set()
            time.sleep(0.3)  # Chromium opens 6 connections a host: the rest wait for one
            body = b"window.loaded = (window.loaded || 0) + 1;"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_page() -> Iterator[tuple[str, threading.Event]]:
    class Handler(_SlowScripts):
        first_script = threading.Event()  # this test's own

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", Handler.first_script
    finally:
        server.shutdown()
        server.server_close()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _interface_churn(started: threading.Event, name: str) -> None:
    """Once the page's scripts are loading, a veth pair with an address comes and goes, as
    Docker's does for a sandbox. No IPv6 link-local address and no route off the host: the
    pair only exists, nothing is sent on it."""
    started.wait(10)
    _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
    try:
        _ip("link", "set", name, "addrgenmode", "none")
        _ip("link", "set", f"{name}p", "addrgenmode", "none")
        _ip("addr", "add", "192.0.2.1/32", "dev", name)  # TEST-NET-1: routes nowhere real
        _ip("link", "set", name, "up")
        _ip("link", "set", f"{name}p", "up")
        time.sleep(0.2)
    finally:
        _ip("link", "del", name)


def _load_during_churn(
    browser: Browser, page_url: str, started: threading.Event
) -> tuple[int, list[str]]:
    page = browser.new_page()
    failures: list[str] = []
    page.on("requestfailed", lambda request: failures.append(request.failure or "?"))
    with ThreadPoolExecutor(1) as pool:
        churn = pool.submit(_interface_churn, started, f"mnl{os.getpid() % 100000}")
        try:
            page.goto(page_url)
            loaded = page.evaluate("window.loaded || 0")
        finally:
            churn.result()  # the interface really came and went (or why it could not)
            page.close()
    return loaded, failures


def test_a_plain_chromium_fails_loads_when_an_interface_changes(
    browser: Browser, slow_page: tuple[str, threading.Event]
) -> None:
    plain = chromium.launch(browser.browser_type, no_netlink=None)
    try:
        loaded, failures = _load_during_churn(plain, *slow_page)
    finally:
        plain.close()
    assert loaded < SCRIPTS
    assert "net::ERR_NETWORK_CHANGED" in failures


def test_the_suites_chromium_loads_every_script_while_an_interface_changes(
    browser: Browser, slow_page: tuple[str, threading.Event]
) -> None:
    loaded, failures = _load_during_churn(browser, *slow_page)
    assert failures == []
    assert loaded == SCRIPTS
