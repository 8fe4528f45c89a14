"""A real `mosoo web` process and Chromium for the browser journeys."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, WebSocket, expect, sync_playwright

from mosoo_core import migrations
from mosoo_core.settings import reset_settings_cache
from tests.support import chromium
from tests.support.processes import console_slot, mosoo_env, page_served, running, wait_for
from tests.support.redis_db import redis_url

# An `expect` waits up to this long (Playwright's default is 5 s) for what a server round trip
# brings: an upload becoming a chip took longer than 5 s once late in a full run on 2 cores.
# A passing expectation returns as soon as it holds, so this costs a passing run nothing.
expect.set_options(timeout=15_000)


@dataclass(frozen=True)
class WebServer:
    url: str
    database_url: str
    log: Path


# How often the console's web process sweeps its tabs' sessions (30 s by default): shorter,
# so an expiry test waits less, and still longer than a sign-out push is given
# (tests/browser/test_sign_out_tabs.py), so the sweep never stands in for a missing push.
TAB_SWEEP_SECONDS = 15


@pytest.fixture(scope="session")
def web_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    migrations.upgrade(database_url)
    data_dir = tmp_path_factory.mktemp("web-data")
    log = data_dir / "web.log"
    env = mosoo_env(
        data_dir,
        database_url,
        # The run's default Redis database, as the test process's (tests/conftest.py): a
        # worker's console never counts another worker's sign-ins.
        MOSOO_REDIS_URL=redis_url(0),
        # The journeys' MCP servers (tests/support/mcp_server.py) listen on loopback.
        MOSOO_MCP_ALLOW_PRIVATE_NETWORKS="true",
        MOSOO_TAB_SWEEP_SECONDS=str(TAB_SWEEP_SECONDS),
    )
    with console_slot() as console, running(["web"], env | console.env, log) as process:
        url = console.url
        try:
            wait_for(lambda: page_served(f"{url}/login"), 600, "the console to be served", process)
        except Exception:
            print(log.read_text()[-5000:])
            raise
        yield WebServer(url=url, database_url=database_url, log=log)


@pytest.fixture(scope="session")
def no_netlink(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The preload every browser test's Chromium runs with (tests/support/no_netlink.c)."""
    return chromium.build_no_netlink(tmp_path_factory.mktemp("chromium"))


@pytest.fixture(scope="module")
def browser(no_netlink: Path) -> Iterator[Browser]:
    # Module scope: Playwright's sync API runs an event loop in the main thread for as long
    # as it is open, and asyncio tests elsewhere need that thread free again.
    with sync_playwright() as playwright:
        browser = chromium.launch(playwright.chromium, no_netlink)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(30_000)
    page = context.new_page()
    record_connection(page)
    yield page
    context.close()


_CONNECTION_LOGS: weakref.WeakKeyDictionary[Page, list[str]] = weakref.WeakKeyDictionary()


def record_connection(page: Page) -> None:
    """Keep what `page` does to reach the backend from now on (console lines, page errors,
    each websocket's open, first frames, errors and close), for `connection_report`."""
    log: list[str] = []
    started = time.monotonic()

    def note(text: str) -> None:
        log.append(f"{time.monotonic() - started:7.2f}s {text[:300]}")

    def watch(socket: WebSocket) -> None:
        note(f"websocket opened {socket.url}")
        frames = {"sent": 0, "received": 0}

        def listen(direction: str) -> None:
            # The handshake and the hydrate, then no more: later frames are state updates,
            # and each one a listener takes costs a round trip through Playwright.
            def frame(payload: str | bytes) -> None:
                frames[direction] += 1
                note(f"websocket {direction} {payload!r}")
                if frames[direction] == 3:
                    socket.remove_listener(f"frame{direction}", frame)

            socket.on(f"frame{direction}", frame)

        listen("sent")
        listen("received")
        socket.on("socketerror", lambda error: note(f"websocket error {error}"))
        socket.on("close", lambda _: note(f"websocket closed after {frames}"))

    page.on("console", lambda message: note(f"console.{message.type} {message.text}"))
    page.on("pageerror", lambda error: note(f"pageerror {error}"))
    page.on("websocket", watch)
    _CONNECTION_LOGS[page] = log


def connection_report(page: Page) -> str:
    """For a failure message: why a page may never have loaded its state."""
    log = _CONNECTION_LOGS.get(page)
    if log is None:
        return "(the page's connection was not recorded)"
    return f"{page.url}: its connection to the backend, from the page's creation:\n" + (
        "\n".join(log) or "(no console line and no websocket at all)"
    )


def received_frames(page: Page) -> list[str]:
    """Every websocket frame the server sends `page` from now on (for asserting that a
    secret never comes back to the browser in any state update)."""
    received: list[str] = []

    def watch(socket: WebSocket) -> None:
        socket.on(
            "framereceived",
            lambda payload: received.append(
                payload if isinstance(payload, str) else payload.decode(errors="replace")
            ),
        )

    page.on("websocket", watch)
    return received


@pytest.fixture
def shared_database(web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> WebServer:
    """This process reads and writes the web process's database and object store (what
    the worker would write, or what the console saved), and labels sandboxes as its own."""
    monkeypatch.setenv("MOSOO_DATABASE_URL", web_server.database_url)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(web_server.log.parent))  # the fixture's data dir
    reset_settings_cache()
    return web_server
