"""`mosoo web` builds the frontend only when what the build is made of changed: the compiled
pages, env.json (the port and URLs), the build-time environment, Reflex's version."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mosoo_web.serve import REUSING, STAMP, build_inputs, build_unless_unchanged

VERSION = "0.10.1"


@pytest.fixture
def web_dir(tmp_path: Path) -> Path:
    web = tmp_path / ".web"
    (web / "app" / "routes").mkdir(parents=True)
    (web / "app" / "routes" / "login.jsx").write_text("export default Login")
    (web / "env.json").write_text('{"EVENT": "ws://127.0.0.1:21000/_event"}')
    (web / "package.json").write_text('{"dependencies": {}}')
    return web


class Builds:
    """A stand-in for Reflex's `build`: counts calls and writes the page it would write."""

    def __init__(self, built_page: Path, fail: bool = False) -> None:
        self.built_page = built_page
        self.calls = 0
        self.fail = fail

    def __call__(self) -> None:
        self.calls += 1
        if self.fail:
            raise SystemExit(1)
        self.built_page.parent.mkdir(parents=True, exist_ok=True)
        self.built_page.write_text("<html>")


def test_the_inputs_are_stable_and_leave_out_the_builds_own_output(web_dir: Path) -> None:
    before = build_inputs(web_dir, VERSION, {})
    assert build_inputs(web_dir, VERSION, {}) == before
    (web_dir / "build" / "client").mkdir(parents=True)
    (web_dir / "build" / "client" / "404.html").write_text("<html>")
    (web_dir / "node_modules" / "react").mkdir(parents=True)
    (web_dir / "node_modules" / "react" / "index.js").write_text("react")
    (web_dir / "reflex.json").write_text('{"last_run": 123}')
    (web_dir / STAMP).write_text("{}\n")
    assert build_inputs(web_dir, VERSION, {"PATH": "/elsewhere"}) == before


@pytest.mark.parametrize(
    "change",
    [
        "page",
        "new page",
        "renamed page",
        "port",
        "build-time environment",
        "reflex version",
    ],
)
def test_the_inputs_change_with_anything_the_build_reads(web_dir: Path, change: str) -> None:
    before = build_inputs(web_dir, VERSION, {})
    version, environ = VERSION, {}
    routes = web_dir / "app" / "routes"
    if change == "page":
        (routes / "login.jsx").write_text("export default SignIn")
    elif change == "new page":
        (routes / "agents.jsx").write_text("export default Agents")
    elif change == "renamed page":
        (routes / "login.jsx").rename(routes / "sign-in.jsx")
    elif change == "port":
        (web_dir / "env.json").write_text('{"EVENT": "ws://127.0.0.1:21001/_event"}')
    elif change == "build-time environment":
        environ = {"VITE_BASE": "/console"}
    else:
        version = "0.10.2"
    assert build_inputs(web_dir, version, environ) != before


def test_an_unchanged_input_reuses_the_last_build(
    web_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built_page = web_dir / "build" / "client" / "404.html"
    build = Builds(built_page)
    maybe_build = build_unless_unchanged(build, web_dir, built_page, VERSION)
    maybe_build()
    assert build.calls == 1
    assert json.loads((web_dir / STAMP).read_text()) == build_inputs(
        web_dir, VERSION, dict(os.environ)
    )
    maybe_build()
    assert build.calls == 1
    assert REUSING in capsys.readouterr().out

    (web_dir / "env.json").write_text('{"EVENT": "ws://127.0.0.1:21001/_event"}')
    maybe_build()
    assert build.calls == 2
    assert "building the frontend (changed: env.json)" in capsys.readouterr().out


def test_a_missing_build_is_built_again(web_dir: Path) -> None:
    built_page = web_dir / "build" / "client" / "404.html"
    build = Builds(built_page)
    maybe_build = build_unless_unchanged(build, web_dir, built_page, VERSION)
    maybe_build()
    built_page.unlink()
    maybe_build()
    assert build.calls == 2


def test_a_failed_build_leaves_no_stamp_so_the_next_start_builds(web_dir: Path) -> None:
    built_page = web_dir / "build" / "client" / "404.html"
    build_unless_unchanged(Builds(built_page), web_dir, built_page, VERSION)()
    (web_dir / "app" / "routes" / "login.jsx").write_text("export default SignIn")

    failing = Builds(built_page, fail=True)
    with pytest.raises(SystemExit):
        build_unless_unchanged(failing, web_dir, built_page, VERSION)()
    assert not (web_dir / STAMP).exists()  # the page from the earlier build is still there

    again = Builds(built_page)
    build_unless_unchanged(again, web_dir, built_page, VERSION)()
    assert again.calls == 1
