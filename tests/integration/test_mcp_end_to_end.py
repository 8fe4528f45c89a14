"""MCP servers end to end, with real Docker sandboxes under network `none`, the real
`mosoo control` and `mosoo worker`, and real MCP servers on loopback: ours (the SDK, bearer
auth) and `@modelcontextprotocol/server-everything`, a peer no one here wrote.

An Agent bound to a skill and to two MCP servers (bearer), in one run and one sandbox: the
system prompt the model gets lists the skill (name, description, path; not its body) and
the read tool returns its SKILL.md from /opt/mosoo/skills/<name>/; one tool is called with
Allow and one with Ask (approved). Each server saw its vaulted token and never a grant; the
tokens and the servers' URLs are nowhere in the container (its configuration, any process's
environment or command line, the files under /run/mosoo, /workspace, /tmp, /home and the
skill mount), in the events, the snapshot, or what the model was sent. From inside the
sandbox, over control's socket, the real proxy opens the server to this run's grant for it
and refuses this run's grant for the other server, a grant of another (cancelled) run and
an unknown one; once the run is over its grant is refused too.

A down required server fails the run with `mcp_unavailable`; a down optional one is
reported and the run goes on."""

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

from mosoo_core import agents, mcp, sessions, skills
from mosoo_core.mcp import McpServerChanges
from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.sessions import actions, driver_plane
from mosoo_core.tables.sessions import SessionRun
from tests.integration.test_skills_end_to_end import bind_skill
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
OTHER_TOKEN = "mcp-e2e-OTHER-VAULTED-Hs5Km2Pz8Vd4"
EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything"
EVERYTHING_DIR = Path(__file__).resolve().parents[2] / "data" / "test-tools" / "server-everything"
SKILL_MD = """\
---
name: weather-report
description: Report the weather of a city with the tools server. Use when asked for weather.
---
# Weather report

Call `tools__forecast` for the city, then `tools__echo` the one-line summary.
"""
SKILL_PATH = "/opt/mosoo/skills/weather-report/SKILL.md"


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


@pytest.fixture
def other_server() -> Iterator[MCPTestServer]:
    with MCPTestServer(bearer=OTHER_TOKEN) as server:
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


def _bind_skill(engine: Engine, owner: Owner) -> skills.SkillUpload:
    return bind_skill(engine, owner, SKILL_MD.encode(), "weather-report.md")


def _events(engine: Engine, thread_id: str) -> list[tuple[str, dict[str, object]]]:
    with Session(engine) as db:
        return [(e.type, e.payload) for e in driver_plane.read_events(db, thread_id, limit=1000)]


def _python(script: str, payload: object) -> str:
    """A bash command running `script` with `payload` as its argument, base64-encoded JSON,
    so the command line (which the secrets probe reads) does not hold the payload as is."""
    encoded = base64.b64encode(json.dumps(payload).encode()).decode()
    return f"python3 -c {shlex.quote(script)} {encoded}"


_PROBE = """
import base64, glob, json, os, sys
needles = json.loads(base64.b64decode(sys.argv[1]))
places = glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline")
for top in ("/run/mosoo", "/workspace", "/tmp", "/home", "/opt/mosoo/skills"):
    for folder, _, names in os.walk(top):
        places += [os.path.join(folder, name) for name in names]
found = {name: [] for name in needles}
read, drivers = [], []
for place in places:
    try:
        with open(place, "rb") as handle:
            data = handle.read(16 * 1024 * 1024)
    except OSError:
        continue
    read.append(place)
    if place.endswith("/cmdline") and b"driver.main" in data:
        drivers.append(place.replace("/cmdline", "/environ"))
    for name, value in needles.items():
        if value.encode() in data:
            found[name].append(place)
print(json.dumps({
    "read": len(read),
    "driver_environ": [place for place in drivers if place in read],
    "skills": [place for place in read if place.startswith("/opt/mosoo/skills/")],
    **found,
}))
"""


def _probe(needles: dict[str, str]) -> str:
    """Prints what holds each needle inside the sandbox: every process's environment and
    command line, and the files under /run/mosoo, /workspace, /tmp, /home and the skill
    mount; with how many it could read, the driver's environment and the skill files among
    them."""
    return _python(_PROBE, needles)


_GRANT_PROBE = """
import base64, http.client, json, socket, sys

class Control(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect("/run/mosoo/control/control.sock")

initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "1"}}}
answers = {}
for label, (server, grant) in json.loads(base64.b64decode(sys.argv[1])).items():
    control = Control("control", timeout=30)
    control.request("POST", "/gateway/mcp/" + server, body=json.dumps(initialize), headers={
        "Authorization": "Bearer " + grant, "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"})
    response = control.getresponse()
    code = None
    if response.getheader("content-type", "").startswith("application/json"):
        error = json.loads(response.read()).get("error") or {}
        code = (error.get("data") or {}).get("code")
    answers[label] = [response.status, code]
    control.close()
print(json.dumps(answers))
"""


def _grant_probe(grants: dict[str, tuple[str, str]]) -> str:
    """Prints, per label, the status and error code control's MCP proxy answers to an MCP
    `initialize` sent from inside the sandbox, over control's socket (the way out under
    `none`), to `/gateway/mcp/<server>` with `Authorization: Bearer <grant>`."""
    return _python(_GRANT_PROBE, grants)


def _issue_grants(
    engine: Engine, owner: Owner, run_id: str, server_id: str, other_id: str
) -> dict[str, tuple[str, str]]:
    """Grants as the worker issues them at boot: of the live run for each server, and of a
    run of another thread (cancelled before it started) for the same server."""
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        elsewhere = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id)
        sent = sessions.send_message(db, owner.account_id, elsewhere.id, "never dispatched")
        other_run = db.get(SessionRun, sent.run.id)
        assert other_run is not None
        grants = {
            "this run, this server": (server_id, mcp.issue_grant(db, run, server_id)),
            "this run, other server": (server_id, mcp.issue_grant(db, run, other_id)),
            "other run, this server": (server_id, mcp.issue_grant(db, other_run, server_id)),
            "unknown": (server_id, "mcg_" + "x" * 43),
        }
        sessions.cancel_active_run(db, owner.account_id, elsewhere.id)
        db.commit()
        return grants


def test_an_agent_reads_its_skill_calls_mcp_tools_with_allow_and_ask_and_no_secret_leaks(
    stack: RuntimeStack, mcp_server: MCPTestServer, other_server: MCPTestServer
) -> None:
    address = f"127.0.0.1:{mcp_server.port}"
    other_address = f"127.0.0.1:{other_server.port}"
    needles = {
        "token": TOKEN,
        "address": address,
        "other_token": OTHER_TOKEN,
        "other_address": other_address,
    }
    stack.model.add(
        ToolCallsTurn([ToolCall("read", {"path": SKILL_PATH}, id="r1")]),
        ToolCallsTurn([ToolCall("tools__forecast", {"city": "Oslo"}, id="m1")]),
        ToolCallsTurn([ToolCall("tools__echo", {"text": "asked first"}, id="m2")]),
    )
    owner = make_agent(
        stack.engine,
        stack.model.base_url,
        PROVIDER_KEY,
        tools={"read": "allow", "bash": "allow"},
    )
    upload = _bind_skill(stack.engine, owner)
    server_id, other_id = _bind(
        stack.engine,
        owner,
        [
            McpServerChanges(
                name="tools", url=mcp_server.url, auth_kind="bearer", bearer_token=TOKEN
            ),
            McpServerChanges(
                name="other", url=other_server.url, auth_kind="bearer", bearer_token=OTHER_TOKEN
            ),
        ],
        {
            "tools": {"default": "allow", "tools": {"echo": "ask"}, "required": True},
            "other": {"default": "allow", "required": True},
        },
    )
    thread = new_thread(stack.engine, owner)
    run_id = send(stack.engine, owner.account_id, thread, "Report the weather in Oslo")

    def asked() -> bool:
        return any(t == "tool.confirmation.required" for t, _ in _events(stack.engine, thread))

    wait_for(asked, 240, "the Ask prompt for tools__echo")
    request = next(p for t, p in _events(stack.engine, thread) if t == "tool.confirmation.required")
    assert (request["name"], request["input"]) == ("tools__echo", {"text": "asked first"})
    # While it waits, the container is live: its configuration holds no secret.
    [container] = docker.from_env().containers.list(
        filters={"label": f"{LABEL_SUBJECT}=session:{thread}"}
    )
    configuration = json.dumps(container.attrs)
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert not [name for name, value in needles.items() if value in configuration]
    # The run is live: once Ask is answered, the sandbox presents grants to the real proxy.
    grants = _issue_grants(stack.engine, owner, run_id, server_id, other_id)
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": _grant_probe(grants)}, id="g1")]),
        ToolCallsTurn([ToolCall("bash", {"command": _probe(needles)}, id="b1")]),
        TextTurn("Oslo: 21.5 °C, clear."),
    )
    actions.answer_permission(owner.account_id, thread, str(request["request_id"]), "allow_once")
    run = wait_run(stack.engine, run_id, 240)
    assert run.status == "completed", (run.error_code, run.error_message)

    # The model was told of the skill (where it is, not what it says) and read it there.
    system = stack.model.chat_requests[0].messages[0]
    assert system["role"] == "system"
    assert "<available_skills>" in system["content"]
    assert "<name>weather-report</name>" in system["content"]
    assert f"<description>{upload.version.description}</description>" in system["content"]
    assert f"<location>{SKILL_PATH}</location>" in system["content"]
    assert "then `tools__echo` the one-line summary" not in system["content"]
    events = _events(stack.engine, thread)
    completed = {p["tool_call_id"]: p for t, p in events if t == "tool.use.completed"}
    assert completed["r1"]["is_error"] is False
    read = str(completed["r1"]["output"])
    assert [line.split("\t", 1)[1] for line in read.splitlines()] == SKILL_MD.splitlines()
    assert completed["m1"]["structured_content"] == {
        "city": "Oslo",
        "temperature_c": 21.5,
        "sky": "clear",
    }
    assert completed["m2"]["output"] == "echo: asked first"
    # Only this run's grant for this server opens it; the proxy itself refuses the others.
    assert json.loads(str(completed["g1"]["output"])) == {
        "this run, this server": [200, None],
        "this run, other server": [401, "invalid_grant"],
        "other run, this server": [401, "invalid_grant"],
        "unknown": [401, "invalid_grant"],
    }
    probe = json.loads(str(completed["b1"]["output"]))
    assert probe["read"] > 5 and probe["driver_environ"] and SKILL_PATH in probe["skills"], probe
    assert all(probe[name] == [] for name in needles), probe
    status = {p["server"]: p["status"] for t, p in events if t == "mcp.server.status"}
    assert status == {"tools": "connected", "other": "connected"}
    calls = [p for t, p in events if t == "mcp.tool_call"]
    assert [(c["tool"], c["outcome"]) for c in calls] == [("forecast", "ok"), ("echo", "ok")]
    assert all(c["server_id"] == server_id for c in calls)
    # Each server saw its own vaulted token on every request, never a grant.
    seen = mcp_server.mcp_requests()
    assert seen and {r.authorization for r in seen} == {f"Bearer {TOKEN}"}
    other_seen = other_server.mcp_requests()
    assert other_seen and {r.authorization for r in other_seen} == {f"Bearer {OTHER_TOKEN}"}
    # Nor is any secret in the events, the snapshot, or what the model was sent.
    everything = json.dumps(events) + json.dumps(run.snapshot)
    everything += json.dumps([r.body for r in stack.model.requests])
    assert not [name for name, value in needles.items() if value in everything]
    assert run.snapshot["skills"][0]["path"] == SKILL_PATH
    # The run is over: the grant that opened the server a moment ago no longer does.
    finished = httpx.post(
        f"http://127.0.0.1:{stack.env['MOSOO_CONTROL_PORT']}/gateway/mcp/{server_id}",
        headers={"Authorization": f"Bearer {grants['this run, this server'][1]}"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert finished.status_code == 401
    assert finished.json()["error"]["data"]["code"] == "invalid_grant"


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
