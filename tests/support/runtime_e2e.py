"""What the end-to-end tests of the agent runtimes (`claude`, `acp`) share: the thread's
events, the Pet's sandbox and commands run in it as root, the secrets probe, answering an
Ask prompt, and an Agent bound to a skill and to the test MCP server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, mcp, skills
from mosoo_core.mcp import McpServerChanges
from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.sessions import actions, driver_plane
from mosoo_core.tables.sessions import SessionRun
from tests.integration.test_skills_end_to_end import bind_skill
from tests.support.mcp_server import MCPTestServer
from tests.support.processes import wait_for
from tests.support.stack import TERMINAL, Owner, make_agent, new_thread

MCP_SERVER = "tools"  # the bound test MCP server's name
MCP_TOKEN = "mcp-runtime-e2e-VAULTED-Wq4Hn8Zt2Lp6"
SKILL_NAME = "weather-report"
SKILL_PATH = f"/opt/mosoo/skills/{SKILL_NAME}/SKILL.md"
SKILL_DESCRIPTION = (
    "Report the weather of a city with the tools server. Use when asked for weather."
)
SKILL_MD = f"""\
---
name: {SKILL_NAME}
description: {SKILL_DESCRIPTION}
---
# Weather report

Call the forecast tool for the city, then echo the one-line summary.
"""
# A command whose only trace is the file it makes: run, it would leave REJECTED_FILE.
REJECTED_FILE = "/workspace/rejected-by-the-user.txt"
REJECTED_COMMAND = f"touch {REJECTED_FILE}"


Event = tuple[str, str | None, dict[str, Any]]


def thread_events(engine: Engine, thread_id: str) -> list[Event]:
    """The thread's stored events: type, run id, payload."""
    with Session(engine) as db:
        return [
            (e.type, e.run_id, e.payload)
            for e in driver_plane.read_events(db, thread_id, limit=2000)
        ]


def run_events(engine: Engine, thread_id: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(t, p) for t, r, p in thread_events(engine, thread_id) if r == run_id]


def pet_sandbox(owner: Owner) -> Any:
    """The Pet Agent's one live container."""
    [container] = docker.from_env().containers.list(
        filters={"label": f"{LABEL_SUBJECT}=agent:{owner.agent_id}"}
    )
    return container


def in_container(container: Any, script: str) -> bytes:
    """`sh -c script` as root in the container; it must succeed."""
    result = container.exec_run(["sh", "-c", script], user="0")
    assert result.exit_code == 0, result.output
    return bytes(result.output)


def processes(container: Any) -> bytes:
    """Every process's command line in the sandbox, arguments joined by spaces."""
    return in_container(container, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; true")


def assert_secret_nowhere(container: Any, secret: str) -> None:
    """No process's command line or environment and no file of the live sandbox holds
    `secret` (the probe's own command line holds only a file name)."""
    in_container(container, f"printf '{secret[:16]}\\n' > /tmp/needle")
    found = in_container(
        container,
        "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"
        " | grep -cF -f /tmp/needle; "
        "grep -rlF -f /tmp/needle / --exclude-dir=proc --exclude-dir=sys --exclude=needle"
        " 2>/dev/null; true",
    )
    assert found.strip() == b"0", found


def asked(engine: Engine, thread_id: str, run_id: str) -> dict[str, Any] | None:
    """The run's first permission prompt, if it came."""
    return next(
        (p for t, p in run_events(engine, thread_id, run_id) if t == "tool.confirmation.required"),
        None,
    )


def answer_prompt(
    engine: Engine, owner: Owner, thread_id: str, run_id: str, decision: str
) -> dict[str, Any]:
    """Wait for the run's permission prompt (failing at once if the run ends first), answer
    it with `decision` (`allow_once` or `reject_once`) and return it."""

    def asked_or_ended() -> bool:
        with Session(engine) as db:
            run = db.get(SessionRun, run_id)
            assert run is not None and run.status not in TERMINAL, run and (
                run.status,
                run.error_code,
                run.error_message,
            )
        return asked(engine, thread_id, run_id) is not None

    wait_for(asked_or_ended, 180, "the Ask prompt")
    request = asked(engine, thread_id, run_id)
    assert request is not None
    actions.answer_permission(owner.account_id, thread_id, str(request["request_id"]), decision)
    return request


def pet_asking_for_bash(engine: Engine, base_url: str, provider_key: str, runtime: str) -> Owner:
    """A Pet Agent of `runtime` whose bash asks and whose read is allowed."""
    return make_agent(
        engine,
        base_url,
        provider_key,
        kind="pet",
        runtime=runtime,
        tools={"bash": "ask", "read": "allow"},
    )


@dataclass(frozen=True)
class SkilledPet:
    owner: Owner
    server: MCPTestServer  # the test MCP server, live while the context lasts
    server_id: str
    thread_id: str


@contextlib.contextmanager
def pet_with_skill_and_mcp(
    engine: Engine, base_url: str, provider_key: str, runtime: str
) -> Iterator[SkilledPet]:
    """`pet_asking_for_bash`, bound to the weather-report skill and to a live test MCP
    server (`bind_skill_and_mcp`), with a new thread."""
    owner = pet_asking_for_bash(engine, base_url, provider_key, runtime)
    with MCPTestServer(bearer=MCP_TOKEN) as server:
        server_id = bind_skill_and_mcp(engine, owner, server)
        yield SkilledPet(owner, server, server_id, new_thread(engine, owner))


def bind_skill_and_mcp(engine: Engine, owner: Owner, server: MCPTestServer) -> str:
    """Bind the weather-report skill and the test MCP server (as `tools`, its vaulted bearer
    MCP_TOKEN, every tool allowed) to the Agent; returns the server's id."""
    bind_skill(engine, owner, SKILL_MD.encode(), f"{SKILL_NAME}.md")
    changes = McpServerChanges(
        name=MCP_SERVER, url=server.url, auth_kind="bearer", bearer_token=MCP_TOKEN
    )
    with Session(engine) as db:
        made = mcp.create_server(db, owner.account_id, owner.app_id, changes)
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            agents.AgentChanges(
                mcp_servers=[made.id],
                mcp_policies={made.id: {"default": "allow", "required": True}},
            ),
        )
        [skill] = skills.list_skills(db, owner.account_id, owner.app_id)
        assert skill.name == SKILL_NAME
        db.commit()
        return made.id


def assert_mcp_echo_went_through_the_proxy(
    engine: Engine, thread_id: str, run_id: str, server: MCPTestServer, server_id: str
) -> None:
    """The run's one MCP call, `echo`, went through control's proxy (which records it as
    this server's) and the server saw the vaulted token on every request, never a grant."""
    calls = [p for t, p in run_events(engine, thread_id, run_id) if t == "mcp.tool_call"]
    assert [(c["tool"], c["outcome"], c["server_id"]) for c in calls] == [("echo", "ok", server_id)]
    seen = server.mcp_requests()
    assert seen and {r.authorization for r in seen} == {f"Bearer {MCP_TOKEN}"}
