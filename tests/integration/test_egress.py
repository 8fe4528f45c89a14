"""The `limited` network in real Docker sandboxes: the sandbox still has no interface but
loopback, its HTTP clients (Python's urllib in bash, the web_fetch tool) reach an allowed host
only through control's egress proxy, another host is refused with the reason in the thread's
events, and a thread keeps the allowlist of the revision it started with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import environments
from mosoo_core.environments import EnvironmentChanges
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.pages import LoopbackPage
from tests.support.redis_db import db_number
from tests.support.stack import (
    Owner,
    RuntimeStack,
    make_agent,
    new_thread,
    runtime_stack,
    send,
    wait_run,
)

REDIS_DB = db_number(1)
PROVIDER_KEY = "sk-egress-TOPSECRET-77aa88bb"


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    with LoopbackPage("allowed") as allowed, LoopbackPage("other") as other:
        yield allowed.port, other.port


@pytest.fixture
def stack(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RuntimeStack]:
    with runtime_stack(
        engine,
        database_url,
        tmp_path,
        monkeypatch,
        redis_db=REDIS_DB,
        extra_env={"MOSOO_EGRESS_ALLOW_LOOPBACK": "1"},
    ) as stack:
        yield stack


def _fetch_with_python(port: int) -> str:
    return (
        '/opt/mosoo/venv/bin/python -c "import urllib.request as u; '
        f"print(u.urlopen('http://127.0.0.1:{port}/x', timeout=10).read().decode()[:80])\" 2>&1 "
        "| tail -1; ls /sys/class/net"
    )


def _network_events(stack: RuntimeStack, thread_id: str) -> list[dict[str, object]]:
    with Session(stack.engine) as db:
        return [
            e.payload
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "network.request"
        ]


def _outputs(stack: RuntimeStack, thread_id: str) -> list[str]:
    with Session(stack.engine) as db:
        return [
            str(e.payload["output"])
            for e in driver_plane.read_events(db, thread_id, limit=1000)
            if e.type == "tool.use.completed"
        ]


def test_limited_reaches_only_the_allowed_host_through_the_proxy(
    stack: RuntimeStack, servers: tuple[int, int]
) -> None:
    allowed, other = servers
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": _fetch_with_python(allowed)}, id="c1")]),
        ToolCallsTurn(
            [ToolCall("web_fetch", {"url": f"http://127.0.0.1:{allowed}/page"}, id="c2")]
        ),
        ToolCallsTurn([ToolCall("web_fetch", {"url": f"http://127.0.0.1:{other}/page"}, id="c3")]),
        ToolCallsTurn([ToolCall("bash", {"command": _fetch_with_python(other)}, id="c4")]),
        TextTurn("Done."),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        tools={"bash": "allow", "web_fetch": "allow"},
        environment=EnvironmentChanges(
            network_policy="limited", allowed_hosts=[f"127.0.0.1:{allowed}"]
        ),
    )
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "fetch"))
    assert run.status == "completed", (run.error_code, run.error_message)

    python_ok, fetched, refused, python_refused = _outputs(stack, thread_id)
    assert "Hello from allowed" in python_ok
    assert python_ok.split()[-1] == "lo"  # still no interface but loopback
    assert "Hello from allowed" in fetched and "Title: Served" in fetched
    assert f"refused 127.0.0.1:{other}" in refused
    assert "403" in python_refused

    decisions = _network_events(stack, thread_id)
    assert [(d["port"], d["outcome"]) for d in decisions] == [
        (allowed, "allowed"),
        (allowed, "allowed"),
        (other, "refused"),
        (other, "refused"),
    ]
    assert all(d["host"] == "127.0.0.1" for d in decisions)
    assert decisions[0]["bytes_received"] > 0
    assert decisions[2]["reason"] in ("ip_literal", "not_allowed", "port_not_allowed")


def test_a_thread_keeps_the_allowlist_it_started_with(
    stack: RuntimeStack, servers: tuple[int, int]
) -> None:
    allowed, other = servers
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        tools={"bash": "allow"},
        environment=EnvironmentChanges(
            network_policy="limited", allowed_hosts=[f"127.0.0.1:{allowed}"]
        ),
    )
    old_thread = new_thread(stack.engine, owner)
    _swap_allowlist(stack, owner, f"127.0.0.1:{other}")
    new = new_thread(stack.engine, owner)
    for thread_id in (old_thread, new):
        stack.model.add(
            ToolCallsTurn([ToolCall("bash", {"command": _fetch_with_python(allowed)})]),
            ToolCallsTurn([ToolCall("bash", {"command": _fetch_with_python(other)})]),
            TextTurn("Done."),
        )
        run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "try both"))
        assert run.status == "completed", (run.error_code, run.error_message)
    assert [(d["port"], d["outcome"]) for d in _network_events(stack, old_thread)] == [
        (allowed, "allowed"),
        (other, "refused"),
    ]
    assert [(d["port"], d["outcome"]) for d in _network_events(stack, new)] == [
        (allowed, "refused"),
        (other, "allowed"),
    ]


def test_under_none_no_request_leaves(stack: RuntimeStack, servers: tuple[int, int]) -> None:
    allowed, _ = servers
    stack.model.add(
        ToolCallsTurn([ToolCall("web_fetch", {"url": f"http://127.0.0.1:{allowed}/"}, id="c1")]),
        ToolCallsTurn([ToolCall("bash", {"command": _fetch_with_python(allowed)}, id="c2")]),
        TextTurn("Nothing."),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        tools={"bash": "allow", "web_fetch": "allow"},
    )
    thread_id = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread_id, "try"))
    assert run.status == "completed", (run.error_code, run.error_message)
    fetched, python = _outputs(stack, thread_id)
    assert "no network access" in fetched
    assert "Hello" not in python and "Connection refused" in python
    assert _network_events(stack, thread_id) == []


def _swap_allowlist(stack: RuntimeStack, owner: Owner, host: str) -> None:
    with Session(stack.engine) as db:
        agent = db.get(Agent, owner.agent_id)
        assert agent is not None and agent.environment_id
        environments.update_environment(
            db,
            owner.account_id,
            owner.app_id,
            agent.environment_id,
            EnvironmentChanges(allowed_hosts=[host]),
        )
        db.commit()
