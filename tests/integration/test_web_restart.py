"""`mosoo web` reuses the frontend it built when nothing the build is made of changed; the
port, which the bundle embeds, is one of those inputs."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from mosoo_web.serve import REUSING
from tests.support.processes import console_slot, mosoo_env, page_served, running, wait_for

pytestmark = pytest.mark.integration


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


def test_a_restart_reuses_the_build_whose_bundle_names_its_port(tmp_path: Path) -> None:
    env = mosoo_env(tmp_path / "data", "")
    logs = [tmp_path / f"web-{n}.log" for n in (1, 2)]
    with console_slot() as console:
        # The slot's folder: an earlier console on this slot may have built it already.
        for log in logs:
            event_url = _start(env | console.env, console.url, log)
            assert event_url.endswith(f":{console.port}/_event")
        assert REUSING in logs[1].read_text()
        # The port is in env.json, one of the build's inputs (tests/unit/test_web_serve.py:
        # a changed input builds again), so a console on another port never gets this bundle.
        web_dir = Path(console.env["REFLEX_WEB_WORKDIR"])
        assert f":{console.port}/_event" in (web_dir / "env.json").read_text()
