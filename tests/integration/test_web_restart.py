"""`mosoo web` reuses the frontend it built when nothing the build is made of changed, and
builds again when something did: the port, which the bundle embeds, is the one that moves."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support.processes import console_slot, mosoo_env, page_served, running, wait_for

pytestmark = pytest.mark.integration

REUSED = "the frontend is unchanged since its last build; reusing it"


def _start(env: dict[str, str], url: str, log: Path) -> str:
    """Start `mosoo web`, wait for the sign-in page, stop it; the bundle's event URL."""
    with running(["web"], env, log) as process:
        try:
            wait_for(lambda: page_served(f"{url}/login"), 600, "the console to be served", process)
            page = httpx.get(f"{url}/login", timeout=10, follow_redirects=True).text
            scripts = re.findall(r'href="(/assets/reflex-env-[^"]+\.js)"', page)
            assert scripts, page[:2000]
            bundle = httpx.get(f"{url}{scripts[0]}", timeout=10).text
        except BaseException:
            print(log.read_text(errors="replace")[-5000:])
            raise
    found = re.search(r"EVENT:`(ws://[^`]+)`", bundle)
    assert found, bundle[:1000]
    return found.group(1)


def test_a_restart_reuses_the_build_and_a_new_port_rebuilds(tmp_path: Path) -> None:
    # A folder of this test's own, not the slot's, so the first start surely builds.
    workdir = {"REFLEX_WEB_WORKDIR": str(tmp_path / "reflex-web")}
    env = mosoo_env(tmp_path / "data", "")
    logs = [tmp_path / f"web-{n}.log" for n in (1, 2, 3)]
    with console_slot() as first:
        assert _start(env | first.env | workdir, first.url, logs[0]).endswith(
            f":{first.port}/_event"
        )
        assert REUSED not in logs[0].read_text()

        assert _start(env | first.env | workdir, first.url, logs[1]).endswith(
            f":{first.port}/_event"
        )
        assert REUSED in logs[1].read_text()

        with console_slot() as other:
            assert other.port != first.port
            event_url = _start(env | other.env | workdir, other.url, logs[2])
    assert REUSED not in logs[2].read_text()
    assert event_url.endswith(f":{other.port}/_event")
