"""MCP servers end to end, with real Docker sandboxes under network `none`, the real
`mosoo control` and `mosoo worker`, and real MCP servers on loopback: ours (the SDK, bearer
auth) and `@modelcontextprotocol/server-everything`, a peer no one here wrote.

An agent calls one tool with Allow and one with Ask (approved); the server saw the vaulted
token and never the sandbox's grant; the token and the server's URL are nowhere in the
container (its configuration, any process's environment or command line, the files under
/run/mosoo and /workspace), in the events, or in the answers. A down required server fails
the run with `mcp_unavailable`; a down optional one is reported and the run goes on."""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, mcp
from mosoo_core.mcp import McpServerChanges
from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.sessions import actions, driver_plane
from tests.support.mcp_server import ALLOW_PRIVATE_NETWORKS, MCPTestServer
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import free_port, wait_for
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

pytestmark = pytest.mark.integration

REDIS_DB = db_number(12)
PROVIDER_KEY = "sk-mcp-e2e-TOPSECRET-1a2b3c4d"
TOKEN = "mcp-e2e-VAULTED-Tq8Wn3Lr6Xb2Yc9"
EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything"
EVERYTHING_DIR = Path(__file__).resolve().parents[2] / "data" / "test-tools" / "server-everything"


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
        extra_env=ALLOW_PRIVATE_NETWORKS,  # the MCP servers here listen on 127.0.0.1
    ) as stack:
        yield stack


@pytest.fixture
def mcp_server() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=TOKEN) as server:
        yield server


def _bind(
    engine: Engine, owner: Owner, changes: list[McpServerChanges], policies: dict[str, object]
) -> list[str]:
    """Create the servers and bind them, `policies` keyed by server name."""
    with Session(engine) as db:
        made = [mcp.create_server(db, owner.account_id, owner.app_id, c) for c in changes]
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            agents.AgentChanges(
                mcp_servers=[m.id for m in made],
                mcp_policies={m.id: policies[m.name] for m in made if m.name in policies},
            ),
        )
        db.commit()
        return [m.id for m in made]


def _events(engine: Engine, thread_id: str) -> list[tuple[str, dict[str, object]]]:
    with Session(engine) as db:
        return [(e.type, e.payload) for e in driver_plane.read_events(db, thread_id, limit=1000)]


_PROBE = """
import base64, glob, json, os, sys
needles = json.loads(base64.b64decode(sys.argv[1]))
places = glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline")
for top in ("/run/mosoo", "/workspace", "/tmp", "/home"):
    for folder, _, names in os.walk(top):
        places += [os.path.join(folder, name) for name in names]
found = {name: [] for name in needles}
for place in places:
    try:
        with open(place, "rb") as handle:
            data = handle.read(16 * 1024 * 1024)
    except OSError:
        continue
    for name, value in needles.items():
        if value.encode() in data:
            found[name].append(place)
print(json.dumps({"searched": len(places), **found}))
"""


def _probe(needles: dict[str, str]) -> str:
    """Prints what holds each needle inside the sandbox: every process's environment and
    command line, and the files under /run/mosoo, /workspace, /tmp and /home. The needles
    travel base64-encoded, so the probe's own command line does not hold them."""
    encoded = base64.b64encode(json.dumps(needles).encode()).decode()
    return f"python3 -c {shlex.quote(_PROBE)} {encoded}"


def test_an_agent_calls_mcp_tools_with_allow_and_ask_and_no_secret_enters_the_sandbox(
    stack: RuntimeStack, mcp_server: MCPTestServer
) -> None:
    address = f"127.0.0.1:{mcp_server.port}"
    needles = {"token": TOKEN, "address": address}
    stack.model.add(
        ToolCallsTurn([ToolCall("tools__forecast", {"city": "Oslo"}, id="m1")]),
        ToolCallsTurn([ToolCall("tools__echo", {"text": "asked first"}, id="m2")]),
        ToolCallsTurn([ToolCall("bash", {"command": _probe(needles)}, id="b1")]),
        TextTurn("Done."),
    )
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY)
    [server_id] = _bind(
        stack.engine,
        owner,
        [
            McpServerChanges(
                name="tools", url=mcp_server.url, auth_kind="bearer", bearer_token=TOKEN
            )
        ],
        {"tools": {"default": "allow", "tools": {"echo": "ask"}, "required": True}},
    )
    thread = new_thread(stack.engine, owner)
    run_id = send(stack.engine, owner.account_id, thread, "Use the tools")

    def asked() -> bool:
        return any(t == "tool.confirmation.required" for t, _ in _events(stack.engine, thread))

    wait_for(asked, 240, "the Ask prompt for tools__echo")
    request = next(p for t, p in _events(stack.engine, thread) if t == "tool.confirmation.required")
    assert (request["name"], request["input"]) == ("tools__echo", {"text": "asked first"})
    # While it waits, the container is live: its configuration holds neither secret.
    [container] = docker.from_env().containers.list(
        filters={"label": f"{LABEL_SUBJECT}=session:{thread}"}
    )
    configuration = json.dumps(container.attrs)
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert TOKEN not in configuration and address not in configuration
    actions.answer_permission(owner.account_id, thread, str(request["request_id"]), "allow_once")
    run = wait_run(stack.engine, run_id, 240)
    assert run.status == "completed", (run.error_code, run.error_message)

    events = _events(stack.engine, thread)
    completed = {p["tool_call_id"]: p for t, p in events if t == "tool.use.completed"}
    assert completed["m1"]["structured_content"] == {
        "city": "Oslo",
        "temperature_c": 21.5,
        "sky": "clear",
    }
    assert completed["m2"]["output"] == "echo: asked first"
    probe = json.loads(str(completed["b1"]["output"]))
    assert probe["searched"] > 10 and (probe["token"], probe["address"]) == ([], []), probe
    status = [p for t, p in events if t == "mcp.server.status"]
    assert status and status[0]["status"] == "connected" and status[0]["server"] == "tools"
    calls = [p for t, p in events if t == "mcp.tool_call"]
    assert [(c["tool"], c["outcome"]) for c in calls] == [("forecast", "ok"), ("echo", "ok")]
    assert all(c["server_id"] == server_id for c in calls)
    # The server saw the vaulted token on every request, never a grant.
    seen = mcp_server.mcp_requests()
    assert seen and {r.authorization for r in seen} == {f"Bearer {TOKEN}"}
    # Nor is either secret in the events, the snapshot, or what the model was sent.
    everything = json.dumps(events) + json.dumps(run.snapshot)
    everything += json.dumps([r.body for r in stack.model.requests])
    assert TOKEN not in everything and address not in everything
    # The grants of that run no longer open anything.
    grant_less = httpx.post(
        f"http://127.0.0.1:{stack.env['MOSOO_CONTROL_PORT']}/gateway/mcp/{server_id}",
        headers={"Authorization": "Bearer mcg_" + "x" * 43},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert grant_less.status_code == 401


def test_a_down_required_server_fails_the_run_and_a_down_optional_one_is_reported(
    stack: RuntimeStack, mcp_server: MCPTestServer
) -> None:
    down_port = free_port()
    down = f"http://127.0.0.1:{down_port}/mcp"
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, email="down@example.com")
    ids = _bind(
        stack.engine,
        owner,
        [
            McpServerChanges(name="needed", url=down),
            McpServerChanges(
                name="tools", url=mcp_server.url, auth_kind="bearer", bearer_token=TOKEN
            ),
        ],
        {
            "needed": {"default": "allow", "required": True},
            "tools": {"default": "allow"},
        },
    )
    thread = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread, "go"), 240)
    assert (run.status, run.error_code) == ("failed", "mcp_unavailable"), run.error_message
    assert "needed" in (run.error_message or "")
    assert stack.model.chat_requests == []
    # Optional now: the run goes on without it, and its events say why.
    with Session(stack.engine) as db:
        agents.update_agent(
            db,
            owner.account_id,
            owner.app_id,
            owner.agent_id,
            agents.AgentChanges(
                mcp_policies={ids[0]: {"default": "allow"}, ids[1]: {"default": "allow"}}
            ),
        )
        db.commit()
    stack.model.add(TextTurn("Went on without it."))
    second = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, second, "go"), 240)
    assert run.status == "completed", (run.error_code, run.error_message)
    statuses = {
        p["server"]: p for t, p in _events(stack.engine, second) if t == "mcp.server.status"
    }
    assert statuses["needed"]["status"] == "failed" and statuses["needed"]["reason"]
    assert f"127.0.0.1:{down_port}" not in json.dumps(statuses)
    assert statuses["tools"]["status"] == "connected"
    offered = {t["function"]["name"] for t in stack.model.chat_requests[-1].body["tools"]}
    assert "tools__echo" in offered and not any(n.startswith("needed__") for n in offered)


# --- @modelcontextprotocol/server-everything ---------------------------------------------


@pytest.fixture
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real reference server from npm, in Streamable HTTP mode on a free port: its URL."""
    given = os.environ.get("MOSOO_TEST_MCP_EVERYTHING_DIR")
    folder = Path(given) if given else EVERYTHING_DIR
    entry = (
        folder
        / "node_modules"
        / "@modelcontextprotocol"
        / "server-everything"
        / "dist"
        / "index.js"
    )
    # Installed by `scripts/setup.sh test` (make test runs it), so this test talks to loopback only.
    assert entry.exists(), (
        f"{EVERYTHING_PACKAGE} is not installed in {folder}: run scripts/setup.sh test"
    )
    # It listens on every interface; this preload keeps it on loopback.
    loopback = tmp_path_factory.mktemp("everything") / "loopback.cjs"
    loopback.write_text(_LOOPBACK_ONLY)
    port = free_port()
    process = subprocess.Popen(
        ["node", "--require", str(loopback), str(entry), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def answers() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return True
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, 60, "server-everything to listen", process)  # type: ignore[arg-type]
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


_LOOPBACK_ONLY = """\
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (port, ...rest) {
  if (typeof port === "number" || typeof port === "string") {
    const callback = rest.find((item) => typeof item === "function");
    return listen.call(this, Number(port), "127.0.0.1", callback);
  }
  return listen.call(this, port, ...rest);
};
"""


def test_server_everything_lists_its_tools_and_a_run_calls_one(
    stack: RuntimeStack, everything: str
) -> None:
    owner = make_agent(stack.engine, stack.model.base_url, PROVIDER_KEY, email="peer@example.com")
    [server_id] = _bind(
        stack.engine,
        owner,
        [McpServerChanges(name="everything", url=everything)],
        {"everything": {"default": "allow", "required": True}},
    )
    tested = mcp.test_server(owner.account_id, owner.app_id, server_id)
    assert tested.ok, tested.error
    names = {tool.name for tool in tested.tools}
    assert "echo" in names, names
    stack.model.add(
        ToolCallsTurn([ToolCall("everything__echo", {"message": "from mosoo"}, id="e1")]),
        TextTurn("Echoed."),
    )
    thread = new_thread(stack.engine, owner)
    run = wait_run(stack.engine, send(stack.engine, owner.account_id, thread, "echo"), 240)
    assert run.status == "completed", (run.error_code, run.error_message)
    events = _events(stack.engine, thread)
    [done] = [p for t, p in events if t == "tool.use.completed"]
    assert done["is_error"] is False and "from mosoo" in str(done["output"])
    assert [(p["tool"], p["outcome"]) for t, p in events if t == "mcp.tool_call"] == [
        ("echo", "ok")
    ]
