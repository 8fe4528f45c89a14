"""Driver protocol v1: every message on the driver <-> control WebSocket (PROTOCOL.md).

JSON text frames, each with a `type`. Control imports these models from here; this module
depends on pydantic only.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

# v2 adds the warm pool's standby: a driver booted without a run (`BootPayload` without an
# execution spec) says `ready {standby: true}`, then gets its run in an `assign` command.
PROTOCOL_VERSION = 2
# What control accepts in hello: a v1 driver (an Assistant's sandbox made before the upgrade
# runs the image's older driver) never stands by, and everything else it says is unchanged.
SUPPORTED_PROTOCOL_VERSIONS = frozenset({1, 2})
MAX_FRAME_BYTES = 1024 * 1024
MAX_EVENTS_PER_BATCH = 64
DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000
MISSED_HEARTBEATS_BEFORE_DISCONNECT = 3
DRIVER_LOST_AFTER_SECONDS = 120
MAX_RECONNECT_BACKOFF_SECONDS = 10.0

# Internal event kinds (driver -> control).
EVENT_KINDS = frozenset(
    {
        "run.started",
        "message.started",
        "message.delta",
        "message.completed",
        "thought.delta",
        "tool.call.started",
        "tool.call.completed",
        "permission.requested",
        "permission.resolved",
        "file.changed",
        "usage.updated",
        "run.completed",
        "run.failed",
        "run.cancelled",
        "mcp.server.status",
    }
)
TERMINAL_EVENT_KINDS = frozenset({"run.completed", "run.failed", "run.cancelled"})

# Internal kind -> public event type of PRODUCT.md (API and console).
PUBLIC_EVENT_TYPES = {
    "run.started": "run.started",
    "message.started": "agent.message.started",
    "message.delta": "agent.message.delta",
    "message.completed": "agent.message.completed",
    "thought.delta": "agent.thinking.delta",
    "tool.call.started": "tool.use.started",
    "tool.call.completed": "tool.use.completed",
    "permission.requested": "tool.confirmation.required",
    "permission.resolved": "tool.confirmation.resolved",
    "file.changed": "file.changed",
    "usage.updated": "usage.updated",
    "run.completed": "run.completed",
    "run.failed": "run.failed",
    "run.cancelled": "run.cancelled",
    "mcp.server.status": "mcp.server.status",
}

# What a backend can say it supports in `hello` (PRODUCT.md "Runtimes"); the catalog of
# runtimes (mosoo_core/agents/_catalog.py) uses the same names, and a test checks they agree.
CAPABILITIES = frozenset(
    {
        "text_stream",  # agent.message.delta
        "thinking_stream",  # agent.thinking.delta
        "tool_stream",  # tool.use.started / completed
        "permission_requests",  # tool.confirmation.required for an Ask policy
        "cancel",  # Stop ends the run as cancelled
        "usage",  # usage.updated from the provider's numbers
        "resume",  # a thread's next run continues the conversation
        "skills",  # bound skills reach the agent
        "mcp",  # bound MCP servers, through control's MCP proxy
    }
)

COMMAND_KINDS = frozenset(
    {
        "assign",  # a standby driver's run (payload: Assignment); control opens it sealed
        "input.start",
        "turn.cancel",
        "permission.resolve",
        "session.stop",
        "checkpoint.prepare",
    }
)


class _Message(BaseModel):
    # defer_build: a model's validator is built on its first use, not at import: a driver
    # starting cold (on a Task run's critical path) builds only the few it uses before ready.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _known(capabilities: list[str]) -> list[str]:
    unknown = sorted(set(capabilities) - CAPABILITIES)
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; known: {sorted(CAPABILITIES)}")
    return capabilities


# --- driver -> control -------------------------------------------------------------------


class Hello(_Message):
    type: Literal["hello"] = "hello"
    driver_instance_id: str = Field(min_length=1, max_length=64)
    boot_token: str | None = Field(default=None, max_length=256)
    resume_token: str | None = Field(default=None, max_length=256)
    protocol_version: int
    driver_version: str = Field(max_length=64)
    runtime: str = Field(max_length=32)
    capabilities: list[str] = Field(default_factory=list, max_length=32)
    pid: int
    last_acked_source_event_id: str | None = Field(default=None, max_length=64)

    @field_validator("capabilities")
    @classmethod
    def _known_capabilities(cls, value: list[str]) -> list[str]:
        return _known(value)


class Ready(_Message):
    type: Literal["ready"] = "ready"
    at: str
    # v2: a driver booted without a run is warm and waits for `assign` (the warm pool).
    standby: bool = False
    # v2: what the backend supports, sent with the ready after `assign` (a standby driver's
    # hello has no backend yet, so it names none).
    capabilities: list[str] | None = Field(default=None, max_length=32)

    @field_validator("capabilities")
    @classmethod
    def _known_capabilities(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _known(value)


class Heartbeat(_Message):
    type: Literal["heartbeat"] = "heartbeat"
    at: str


class DriverEvent(_Message):
    source_event_id: str = Field(min_length=1, max_length=64)
    run_id: str = Field(min_length=1, max_length=64)
    kind: str
    occurred_at: str
    payload: dict[str, Any] = Field(default_factory=dict)


class Events(_Message):
    type: Literal["events"] = "events"
    events: list[DriverEvent] = Field(min_length=1, max_length=MAX_EVENTS_PER_BATCH)


class LogLine(_Message):
    level: Literal["debug", "info", "warning", "error"]
    message: str = Field(max_length=8192)
    at: str


class Logs(_Message):
    type: Literal["logs"] = "logs"
    lines: list[LogLine] = Field(min_length=1, max_length=256)


class CommandUpdate(_Message):
    type: Literal["command_update"] = "command_update"
    command_id: str = Field(min_length=1, max_length=64)
    status: Literal["accepted", "completed", "failed"]
    result: dict[str, Any] | None = None
    error: str | None = Field(default=None, max_length=4096)


DriverMessage = Annotated[
    Hello | Ready | Heartbeat | Events | Logs | CommandUpdate, Field(discriminator="type")
]

# --- control -> driver -------------------------------------------------------------------


class Welcome(_Message):
    type: Literal["welcome"] = "welcome"
    connection_id: str
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    resume_token: str
    acked_source_event_id: str | None = None


class Ack(_Message):
    type: Literal["ack"] = "ack"
    source_event_ids: list[str]
    seqs: list[int]


class Command(_Message):
    type: Literal["command"] = "command"
    command_id: str
    seq: int
    kind: str
    payload: dict[str, Any] = Field(default_factory=dict)


class Close(_Message):
    type: Literal["close"] = "close"
    code: str
    reason: str


ControlMessage = Annotated[Welcome | Ack | Command | Close, Field(discriminator="type")]

# --- boot payload (written by the worker, read once and deleted by the driver) ------------

ToolName = Literal["bash", "read", "write", "edit", "glob", "grep", "web_fetch"]
ToolPolicy = Literal["allow", "ask"]


class GatewayGrant(_Message):
    """How the backend reaches the model: through the in-sandbox forwarder to control's
    gateway, with an opaque per-run grant instead of the provider key."""

    grant: str
    provider: Literal["openai", "anthropic"] = "openai"
    api_style: Literal["chat_completions", "responses"] = "chat_completions"


McpPolicy = Literal["off", "allow", "ask"]
# The path of control's MCP proxy, below the forwarder's `/gateway`: `.../mcp/<ref>`.
MCP_GATEWAY_PATH = "/mcp"


class McpBinding(_Message):
    """One bound MCP server as a run reaches it: through the forwarder to control's MCP
    proxy (`/gateway/mcp/<ref>`), with a per-run, per-server grant as bearer. Never the
    server's URL or credential."""

    ref: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=64)
    grant: str = Field(max_length=256)
    default_policy: McpPolicy = "ask"
    tool_policies: dict[str, McpPolicy] = Field(default_factory=dict)
    required: bool = False  # the run fails with `mcp_unavailable` when it cannot connect


SKILLS_DIR = "/opt/mosoo/skills"  # each bound skill's files, read-only, at <SKILLS_DIR>/<name>


class SkillBinding(_Message):
    """One bound skill as a run sees it: listed in the prompt by name and description, its
    files mounted read-only at `<SKILLS_DIR>/<name>/` (`path` is its SKILL.md)."""

    id: str = Field(max_length=26)
    name: str = Field(min_length=1, max_length=64)
    description: str = Field(max_length=1024)
    version: int
    path: str = Field(max_length=200)


class ExecutionSpec(_Message):
    """The frozen snapshot a run executes (model, prompt, tools, ...)."""

    app_id: str
    agent_id: str
    session_id: str
    runtime: str
    model: str
    system_prompt: str = ""
    tools: dict[ToolName, ToolPolicy] = Field(default_factory=dict)
    provider_options: dict[str, Any] = Field(default_factory=dict)
    gateway: GatewayGrant
    workspace: str = "/workspace"
    skills: list[SkillBinding] = Field(default_factory=list)
    mcp_servers: list[McpBinding] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    # Which of `environment` are secrets: their values are masked in the events sent.
    secret_variables: list[str] = Field(default_factory=list)
    # The environment revision's network: none, limited (through control's egress proxy)
    # or full.
    network_policy: Literal["none", "limited", "full"] = "none"


class BootPayload(_Message):
    """What a driver boots with. Without `execution_spec` it stands by (a warm pool member,
    or a cold start whose run is on its way): it dials control, warms up its runtime, says
    `ready {standby: true}` and waits for an `assign` command carrying its run."""

    control_url: str  # unix:///run/mosoo/control.sock or ws(s)://host/driver/socket
    driver_instance_id: str
    boot_token: str
    traceparent: str = ""
    runtime: str
    execution_spec: ExecutionSpec | None = None


class Assignment(_Message):
    """The payload of `assign`: the run a standby driver takes. It holds the run's grants and
    secret variables, so control stores it sealed and opens it only to send it."""

    execution_spec: ExecutionSpec
    traceparent: str = ""
    # The thread's /workspace checkpoint: the driver fetches it from control
    # (`GET /driver/workspace`, the run's grant as bearer) and extracts it before `ready`.
    restore_workspace: bool = False


# --- environment builds (the worker runs `python -m driver.build` in a build sandbox) -------

ENVIRONMENT_LAYER = "/opt/mosoo/env"  # where a built layer is mounted (read-only in runs)
# The variables a command run through the egress tunnel (`python -m driver.egress`, the
# build) reads its grant and the proxy's socket from; both are removed from its children.
EGRESS_GRANT_ENV = "MOSOO_EGRESS_GRANT"
EGRESS_SOCKET_ENV = "MOSOO_EGRESS_SOCKET"


class BuildJob(_Message):
    """What one build installs into the layer mounted (writable, only here) at `target`.
    The log is a file inside the layer the worker reads while the build runs (the host sees
    the same directory), and moves out of the layer afterwards."""

    pip: list[str] = Field(default_factory=list)
    npm: list[str] = Field(default_factory=list)
    pip_index_url: str
    npm_registry: str
    target: str = ENVIRONMENT_LAYER
    log_name: str = ".mosoo-build.log"


def build_driver_side() -> None:
    """Build now the validators a driver needs once it has a run (the models defer their
    build to first use): a standby driver does it while it warms up, so its run does not."""
    for model in (Assignment, Command, CommandUpdate, DriverEvent, Ready, Heartbeat, Logs):
        model.model_rebuild(force=True)
    _adapter("control")


@functools.cache
def _adapter(kind: Literal["driver", "control"]) -> TypeAdapter[Any]:
    """The validator of one side's messages, built once on first use (control never needs
    the control side's, nor the driver its own)."""
    return TypeAdapter(DriverMessage if kind == "driver" else ControlMessage)


class ProtocolError(ValueError):
    """A frame that breaks the protocol; `code` is the reason sent in `close`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _parse(adapter: TypeAdapter[Any], frame: str | bytes) -> Any:
    if len(frame) > MAX_FRAME_BYTES:
        raise ProtocolError(
            "frame_too_large", f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}"
        )
    try:
        return adapter.validate_json(frame)
    except ValidationError as error:
        first: dict[str, Any] = dict(error.errors()[0]) if error.errors() else {}
        if first.get("type") == "json_invalid":
            raise ProtocolError("invalid_json", "frame is not valid JSON") from None
        if first.get("type") in {"union_tag_invalid", "union_tag_not_found"}:
            raise ProtocolError("unknown_type", "frame has a missing or unknown type") from None
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise ProtocolError("invalid_message", f"{where}: {first.get('msg', 'invalid')}") from None


def parse_driver_message(
    frame: str | bytes,
) -> Hello | Ready | Heartbeat | Events | Logs | CommandUpdate:
    """Validate a frame received by control; raises ProtocolError with a reason code."""
    message = _parse(_adapter("driver"), frame)
    if isinstance(message, Events):
        for event in message.events:
            if event.kind not in EVENT_KINDS:
                raise ProtocolError("invalid_message", f"unknown event kind {event.kind!r}")
    return message  # type: ignore[no-any-return]


def parse_control_message(frame: str | bytes) -> Welcome | Ack | Command | Close:
    """Validate a frame received by the driver."""
    return _parse(_adapter("control"), frame)  # type: ignore[no-any-return]


def encode(message: BaseModel) -> str:
    return message.model_dump_json(exclude_none=True)
