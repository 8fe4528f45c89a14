"""The owner's terminal in Chromium: from an Assistant's Sandbox panel, `pwd` and `id` show
/workspace and the sandbox user; the terminal follows the window's size; closing the page
ends the shell in the sandbox; the Logs tab lists the open and the close. Another owner, a
browser without a session and another site's page (with the owner's cookie) cannot open it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from mosoo_core.runtime.sandbox import SandboxRef
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend
from tests.api.test_terminal import recorded, terminal_processes
from tests.browser import test_pet_pending
from tests.browser.conftest import WebServer
from tests.browser.test_cross_origin import foreign_site
from tests.browser.test_pet_pending import _agent_sandbox, _ready_agent, _signed_in
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser
docker_backend = test_pet_pending.docker_backend  # the same fixture, by its name here

# Opens the terminal's websocket as the console's component does; resolves with whether it
# opened, whether the shell said anything (then it closes it) and how it closed.
PROBE = """
(url) => new Promise((resolve) => {
  const result = {opened: false, output: false, code: null, reason: null};
  const socket = new WebSocket(url);
  socket.onopen = () => { result.opened = true; };
  socket.onmessage = () => { result.output = true; socket.close(); };
  socket.onclose = (event) => {
    result.code = event.code; result.reason = event.reason; resolve(result);
  };
  setTimeout(() => resolve(result), 20000);
})
""".strip()
FOREIGN_PAGE = """<!doctype html><title>Elsewhere</title><pre id="report"></pre>
<script>
({probe})({url}).then((outcome) => {{
  document.getElementById("report").textContent = JSON.stringify(outcome);
}});
</script>
"""


@dataclass(frozen=True)
class Assistant:
    account_id: str
    app_id: str
    agent_id: str
    sandbox: SandboxRef


@pytest.fixture
def assistant(
    page: Page, browser: Browser, shared_database: WebServer, docker_backend: DockerBackend
) -> Iterator[Assistant]:
    """An owner signed in on `page`, whose Assistant's sandbox runs (removed after)."""
    account_id, app_id = _signed_in(page, browser, shared_database, "terminal")
    agent_id = _ready_agent(account_id, app_id)
    ref, selector = _agent_sandbox(docker_backend, account_id, app_id, agent_id)
    yield Assistant(account_id, app_id, agent_id, ref)
    for sandbox in docker_backend.list_by_label(selector):
        docker_backend.remove(sandbox)


def _type(page: Page, command: str) -> None:
    page.get_by_test_id("terminal").click()  # focuses xterm's input
    page.keyboard.type(command)
    page.keyboard.press("Enter")


def _line(screen: Locator, pattern: str) -> re.Match[str]:
    """The last line on the screen that is all `pattern` (waiting for one to show)."""
    found: list[re.Match[str]] = []

    def shown() -> bool:
        lines = [line.strip() for line in screen.locator(":scope > div").all_inner_texts()]
        found[:] = [match for line in lines if (match := re.fullmatch(pattern, line))]
        return bool(found)

    wait_for(shown, 30, f"a line {pattern!r} in the terminal")
    return found[-1]


def _size(page: Page, screen: Locator, marker: str) -> tuple[int, int]:
    """What `stty size` says now (rows, cols), read off the screen."""
    _type(page, f'echo "{marker} $(stty size)"')
    rows, cols = _line(screen, rf"{marker} (\d+) (\d+)").groups()
    return int(rows), int(cols)


def _probe(page: Page, url: str) -> dict[str, object]:
    return dict(page.evaluate(PROBE, url))


def test_the_owner_types_pwd_and_id_in_the_terminal_and_closing_the_page_ends_the_shell(
    page: Page, shared_database: WebServer, docker_backend: DockerBackend, assistant: Assistant
) -> None:
    server, ref = shared_database, assistant.sandbox
    page.goto(f"{server.url}/apps/{assistant.app_id}/agents/{assistant.agent_id}")
    panel = page.get_by_test_id("sandbox-panel")
    expect(panel.get_by_test_id("sandbox-status")).to_have_text("Running")
    panel.get_by_test_id("sandbox-terminal").click()
    screen = page.get_by_test_id("terminal").locator(".xterm-rows")
    expect(screen).to_contain_text("mosoo@sandbox")

    _type(page, "pwd")
    _line(screen, "/workspace")
    _type(page, "id")
    _line(screen, r"uid=10001\(mosoo\) gid=10001\(mosoo\) groups=10001\(mosoo\)")

    # The terminal follows the window: a narrower, shorter window, fewer columns and rows.
    wide = _size(page, screen, "wide")
    page.set_viewport_size({"width": 900, "height": 640})
    sizes: list[tuple[int, int]] = []

    def resized() -> bool:
        # Asked again until the new size is in: the fit follows the layout a frame later.
        sizes.append(_size(page, screen, f"narrow{len(sizes)}"))
        return sizes[-1] != wide

    wait_for(resized, 30, "the terminal to take the window's new size")
    assert sizes[-1][0] < wide[0] and sizes[-1][1] < wide[1], (wide, sizes)

    _type(page, "sleep 600 & echo started")
    _line(screen, "started")
    assert terminal_processes(docker_backend, ref) >= 2  # the shell and its sleep

    # Closing the page closes the socket: the shell and the sleep end in the sandbox.
    context = page.context
    page.close()
    wait_for(
        lambda: terminal_processes(docker_backend, ref) == 0,
        30,
        "the terminal's processes to end in the sandbox",
    )
    wait_for(lambda: len(recorded(assistant.agent_id)) == 2, 15, "the close to be recorded")
    assert recorded(assistant.agent_id) == [
        ("terminal open", "done", ""),
        ("terminal close", "done", ""),
    ]

    # The Agent's Logs list both.
    logs = context.new_page()
    logs.goto(f"{server.url}/apps/{assistant.app_id}/agents/{assistant.agent_id}/logs")
    operations = logs.get_by_test_id("sandbox-operations").get_by_test_id("sandbox-operation")
    expect(operations.get_by_test_id("sandbox-operation-name")).to_have_text(
        ["Terminal close", "Terminal open"]
    )


def test_another_owner_no_session_and_another_site_cannot_open_the_terminal(
    page: Page,
    browser: Browser,
    shared_database: WebServer,
    docker_backend: DockerBackend,
    assistant: Assistant,
) -> None:
    server = shared_database
    url = f"{server.url.replace('http://', 'ws://')}/api/terminal/{assistant.agent_id}"
    # The owner's own page opens it (the refusals below are not a broken route).
    assert _probe(page, url)["output"] is True

    # Another owner, signed in in another browser, is told there is no such Agent; a browser
    # without a session is told to sign in. Neither sees any output.
    for prefix, refused in (
        ("term-stranger", (4404, "Agent not found.")),
        ("", (4401, "Sign in to the console to open the terminal.")),
    ):
        elsewhere = browser.new_context()
        try:
            visitor = elsewhere.new_page()
            if prefix:
                _signed_in(visitor, browser, server, prefix)
            else:
                visitor.goto(f"{server.url}/login")
            outcome = _probe(visitor, url)
            assert (outcome["output"], outcome["code"], outcome["reason"]) == (False, *refused)
        finally:
            elsewhere.close()

    # Another site's page, in the owner's browser (the cookie rides along to another port of
    # the same host): the handshake is refused, the socket never opens.
    html = FOREIGN_PAGE.format(probe=PROBE, url=json.dumps(url))
    with foreign_site(html.encode()) as foreign_url:
        foreign = page.context.new_page()
        foreign.goto(foreign_url)
        report = foreign.locator("#report")
        expect(report).not_to_be_empty(timeout=30_000)
        outcome = json.loads(report.inner_text())
    assert outcome["opened"] is False and outcome["code"] == 1006, outcome

    # Only the owner's own open (and its close) reached the Agent and its sandbox.
    wait_for(lambda: len(recorded(assistant.agent_id)) == 2, 15, "the owner's close")
    assert recorded(assistant.agent_id) == [
        ("terminal open", "done", ""),
        ("terminal close", "done", ""),
    ]
    assert terminal_processes(docker_backend, assistant.sandbox) == 0
