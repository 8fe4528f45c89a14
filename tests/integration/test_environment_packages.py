"""An environment's packages in real Docker sandboxes, installed by the real pip and npm from
the test package indexes on loopback through control's egress proxy: built once per packages
hash (never on a run's hot path: a second thread on the same revision does not build again),
mounted read-only, importable by the agent's Python and Node, together with the setup script,
an exposed variable, a setup-only secret and a `limited` network; a build that fails fails the
run with the build's log and leaves no sandbox behind."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core.clock import utcnow
from mosoo_core.environments import EnvironmentChanges, VariableInput
from mosoo_core.environments.builds import build_view
from mosoo_core.runtime.builds import collect_layers
from mosoo_core.runtime.labels import LABEL_BUILD, LABEL_ENV_LAYER, installation_label
from mosoo_core.runtime.sandbox import SandboxSpec, get_backend
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.environments import EnvironmentBuild
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tasks_client import enqueue_environment_build
from tests.integration.test_egress import servers  # noqa: F401  (the two loopback pages)
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.package_index import NpmRegistry, PyPIIndex
from tests.support.processes import wait_for
from tests.support.redis_db import db_number
from tests.support.stack import (
    RuntimeStack,
    labelled_containers,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

pytestmark = pytest.mark.integration

REDIS_DB = db_number(3)
PROVIDER_KEY = "sk-packages-TOPSECRET-5e6f7a8b"
SETUP_SECRET = "ghp_PackagesSetupOnly4Kq9Vn2Lr7Tb"
GREETER = """\
const leftPad = require("left-pad-mosoo");
module.exports = (name) => "[" + leftPad(name, 6, ".") + "]";
"""
# Under `limited` the setup script reaches the allowed hosts too (through the same proxy).
SETUP = """\
set -e
test -n "$GH_TOKEN"
python3 -c "import hello_mosoo; print('setup sees', hello_mosoo.VERSION)"
python3 -c "import urllib.request as u; print('setup fetched', u.urlopen('$PAGE').status)"
mkdir -p /workspace/tools && echo made-by-setup > /workspace/tools/marker
"""


@pytest.fixture
def indexes() -> Iterator[tuple[PyPIIndex, NpmRegistry]]:
    with PyPIIndex() as pypi, NpmRegistry() as npm:
        pypi.add_package("mosoo-greeting", "0.1.0", {"mosoo_greeting.py": 'GREETING = "Hi"\n'})
        pypi.add_package(
            "hello-mosoo",
            "1.2.3",
            {
                "hello_mosoo/__init__.py": "from mosoo_greeting import GREETING\n"
                'VERSION = "1.2.3"\n'
                'def greet(name):\n    return f"{GREETING}, {name}!"\n'
            },
            requires=["mosoo-greeting>=0.1"],
        )
        npm.add_package("left-pad-mosoo", "1.0.0", {"index.js": _LEFT_PAD})
        npm.add_package(
            "@mosoo/greeter",
            "2.0.0",
            {"index.js": GREETER},
            dependencies={"left-pad-mosoo": "1.0.0"},
        )
        yield pypi, npm


_LEFT_PAD = """\
module.exports = function leftPad(text, length, fill) {
  text = String(text);
  while (text.length < length) text = fill + text;
  return text;
};
"""


@pytest.fixture
def stack(
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    indexes: tuple[PyPIIndex, NpmRegistry],
) -> Iterator[RuntimeStack]:
    pypi, npm = indexes
    with runtime_stack(
        engine,
        database_url,
        tmp_path,
        monkeypatch,
        redis_db=REDIS_DB,
        extra_env={
            "MOSOO_EGRESS_ALLOW_LOOPBACK": "1",
            "MOSOO_PIP_INDEX_URL": pypi.simple_url,
            "MOSOO_NPM_REGISTRY": npm.base_url,
        },
    ) as stack:
        yield stack


def _environment(allowed_port: int, pip: list[str], npm: list[str]) -> EnvironmentChanges:
    return EnvironmentChanges(
        pip=pip,
        npm=npm,
        setup_script=SETUP.replace("$PAGE", f"http://127.0.0.1:{allowed_port}/setup"),
        variables=[
            VariableInput("REGION", "eu-west-1"),
            VariableInput("GH_TOKEN", SETUP_SECRET, secret=True, setup_only=True),
        ],
        network_policy="limited",
        allowed_hosts=[f"127.0.0.1:{allowed_port}"],
    )


# Prints `<name>:<HTTP status>` of a GET through the proxy variables (the sandbox has no curl).
_STATUS = (
    '-c "import sys, urllib.request as u, urllib.error as e\n'
    "try: print(sys.argv[1] + ':' + str(u.urlopen(sys.argv[2], timeout=10).status))\n"
    "except e.HTTPError as x: print(sys.argv[1] + ':' + str(x.code))\""
)


def _probe(allowed: int, other: int) -> str:
    return (
        "python3 -c \"import hello_mosoo; print(hello_mosoo.greet('py'))\"; "
        "node -e \"console.log(require('@mosoo/greeter')('js'))\"; "
        "cat /workspace/tools/marker; echo REGION=$REGION; echo GH=${GH_TOKEN:-unset}; "
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c GH_TOKEN; "
        f"python3 {_STATUS} allowed http://127.0.0.1:{allowed}/x; "
        f"python3 {_STATUS} other http://127.0.0.1:{other}/x; "
        "touch /opt/mosoo/env/python/intruder 2>/dev/null && echo writable || echo read-only"
    )


def _events(stack: RuntimeStack, thread_id: str) -> list[tuple[str, dict[str, object]]]:
    with Session(stack.engine) as db:
        return [(e.type, e.payload) for e in driver_plane.read_events(db, thread_id, limit=1000)]


def _builds(stack: RuntimeStack) -> list[EnvironmentBuild]:
    with Session(stack.engine) as db:
        return list(db.exec(select(EnvironmentBuild)).all())


def test_packages_are_built_once_and_every_thread_of_the_revision_uses_them(
    stack: RuntimeStack,
    indexes: tuple[PyPIIndex, NpmRegistry],
    servers: tuple[int, int],  # noqa: F811
) -> None:
    pypi, npm = indexes
    allowed, other = servers
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": _probe(allowed, other)}, id="c1")]),
        ToolCallsTurn(
            [ToolCall("web_fetch", {"url": f"http://127.0.0.1:{allowed}/page"}, id="c2")]
        ),
        TextTurn("Checked."),
        ToolCallsTurn([ToolCall("bash", {"command": _probe(allowed, other)}, id="c3")]),
        TextTurn("Checked again."),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        tools={"bash": "allow", "web_fetch": "allow"},
        environment=_environment(allowed, ["hello-mosoo==1.2.3"], ["@mosoo/greeter@2.0.0"]),
    )
    first = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, first, "probe"), 300)
    assert run.status == "completed", (run.error_code, run.error_message)

    events = _events(stack, first)
    # The run waited for the build, and the chat was told so.
    preparing = [p for t, p in events if t == "run.preparing"]
    assert preparing and preparing[0]["stage"] == "environment"
    output = next(p for t, p in events if t == "tool.use.completed")["output"]
    lines = str(output).strip().splitlines()
    assert lines[:3] == ["Hi, py!", "[....js]", "made-by-setup"], lines
    assert "REGION=eu-west-1" in lines and "GH=unset" in lines
    assert lines[lines.index("GH=unset") + 1] == "0"  # in no process's environment
    assert "allowed:200" in lines and "other:403" in lines
    assert lines[-1] == "read-only"
    fetched = [p for t, p in events if t == "tool.use.completed"][1]
    assert "Hello from allowed" in str(fetched["output"])
    refused = [p for t, p in events if t == "network.request" and p["outcome"] == "refused"]
    assert any(p["port"] == other for p in refused)

    [build] = _builds(stack)
    assert build.status == "ready" and build.attempts == 1 and build.grant_hash == ""
    assert "Successfully installed hello-mosoo-1.2.3 mosoo-greeting-0.1.0" in build.log
    assert "added 2 packages" in build.log
    assert SETUP_SECRET not in build.log
    layer = stack.data_dir / "environments" / build.layer
    assert (layer / "python" / "hello_mosoo" / "__init__.py").is_file()
    assert not (layer / ".mosoo-build.log").exists()
    assert not os.access(layer / "python" / "hello_mosoo" / "__init__.py", os.W_OK) or (
        os.geteuid() == 0  # root may write anything; the sandbox saw it read-only above
    )
    downloads = (len(pypi.downloads), len(npm.downloads))

    # A second thread on the same revision: no build, no download, no waiting.
    second = new_thread(stack.engine, owner)
    again = wait_run(stack.engine, send(stack.engine, owner.account_id, second, "again"), 120)
    assert again.status == "completed", (again.error_code, again.error_message)
    assert [t for t, _ in _events(stack, second) if t == "run.preparing"] == []
    assert (len(pypi.downloads), len(npm.downloads)) == downloads
    [still] = _builds(stack)
    assert still.attempts == 1
    assert not labelled_containers(f"{LABEL_BUILD}={build.packages_hash}")

    with Session(stack.engine) as db:
        stored = [db.get(SessionRun, run.id), db.get(SessionRun, again.id)]
    assert SETUP_SECRET not in json.dumps([r.snapshot for r in stored if r])
    setup_log = stored[0].setup_log if stored[0] else ""
    assert "setup sees 1.2.3" in setup_log and "setup fetched 200" in setup_log


def test_a_failed_build_fails_the_run_with_the_build_log_and_leaves_no_sandbox(
    stack: RuntimeStack,
    servers: tuple[int, int],  # noqa: F811
) -> None:
    allowed, _ = servers
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        environment=_environment(allowed, ["no-such-package-mosoo==9.9.9"], []),
    )
    # What a front door does after a save: the worker's build task runs it, no run needed.
    with Session(stack.engine) as db:
        [row] = db.exec(select(EnvironmentBuild)).all()
        enqueue_environment_build(build_view(row))
    wait_for(lambda: _builds(stack)[0].status == "failed", 120, "the build to fail")
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "hi"), 300)
    assert run.status == "failed" and run.error_code == "environment_build_failed"
    assert run.error_message is not None
    assert "Installing the packages failed" in run.error_message
    assert "no-such-package-mosoo" in run.error_message  # pip's own words, from the log
    assert stack.model.chat_requests == []  # the model was never called
    [build] = _builds(stack)
    assert build.status == "failed" and "no-such-package-mosoo" in build.log
    assert not list((stack.data_dir / "environments" / build.packages_hash).iterdir())
    assert not labelled_containers(f"{LABEL_BUILD}={build.packages_hash}")
    # A second run of the failed revision fails at once with the same log (no new build).
    again = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "again"), 60)
    assert again.error_code == "environment_build_failed"
    [still] = _builds(stack)
    assert still.attempts == 1


def test_unused_layers_are_collected_and_used_ones_kept(stack: RuntimeStack) -> None:
    """The beat's collection, against the real engine: of each build only the ready layer and
    the ones a sandbox still mounts stay; a build nothing needs goes after its keep time."""
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        environment=EnvironmentChanges(pip=["hello-mosoo==1.2.3"]),
    )
    root = stack.data_dir / "environments"
    with Session(stack.engine) as db:
        [current] = db.exec(select(EnvironmentBuild)).all()
        wanted = current.packages_hash
        current.status, current.layer = "ready", f"{wanted}/2"
        db.add(current)
        old = utcnow() - timedelta(days=30)
        for name, last_used in (("a" * 64, old), ("b" * 64, utcnow())):
            db.add(
                EnvironmentBuild(
                    packages_hash=name, status="ready", layer=f"{name}/1", last_used_at=last_used
                )
            )
        db.commit()
    for layer in (f"{wanted}/1", f"{wanted}/2", f"{wanted}/3", "a" * 64 + "/1", "b" * 64 + "/1"):
        (root / layer / "python").mkdir(parents=True)
    backend = get_backend()
    mounted = backend.create(
        SandboxSpec(
            subject=f"session:gc-{owner.agent_id}",
            app_id=owner.app_id,
            labels={**installation_label(), LABEL_ENV_LAYER: f"{wanted}/3", "mosoo.test": "1"},
        )
    )
    try:
        removed = collect_layers(backend, unused_for=timedelta(days=7))
    finally:
        backend.remove(mounted)
    assert removed == 2  # the old attempt of the wanted build, and the build nothing needs
    assert sorted(p.name for p in (root / wanted).iterdir()) == ["2", "3"]
    assert not (root / ("a" * 64)).exists()
    assert (root / ("b" * 64) / "1").is_dir()  # used a moment ago: kept
    with Session(stack.engine) as db:
        assert sorted(b.packages_hash for b in db.exec(select(EnvironmentBuild)).all()) == sorted(
            [wanted, "b" * 64]
        )
