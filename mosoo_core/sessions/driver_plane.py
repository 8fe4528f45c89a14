"""The driver-facing calls of sessions: a driver's hello, registration and liveness, its
command queue, ingestion of what it reports, model grants, and raw event reads and appends.

Only `mosoo_core.control` and `mosoo_core.runtime` (and sessions itself) may import this
module (an import-linter `protected` contract in pyproject.toml): everyone else goes through
the owner-checked calls in `mosoo_core.sessions`."""

from mosoo_core.sessions._drivers import (
    DriverRefused,
    DriverWelcome,
    NewDriver,
    accept_hello,
    apply_command_update,
    commands_to_send,
    enqueue_assignment,
    enqueue_command,
    mark_disconnected,
    mark_ready,
    mark_stopped,
    record_heartbeat,
    register_driver,
    undelivered_commands,
)
from mosoo_core.sessions._events import NewEvent, append_events, read_events
from mosoo_core.sessions._grants import GrantContext, issue_model_grant, resolve_model_grant
from mosoo_core.sessions._marks import MarkClock, record_marks
from mosoo_core.sessions._runs import (
    DriverBatch,
    finish_run,
    ingest_driver_batches,
    ingest_driver_events,
    set_session_status,
    sweep_lost_drivers,
)

__all__ = [
    "DriverBatch",
    "DriverRefused",
    "DriverWelcome",
    "GrantContext",
    "MarkClock",
    "NewDriver",
    "NewEvent",
    "accept_hello",
    "append_events",
    "apply_command_update",
    "commands_to_send",
    "enqueue_assignment",
    "enqueue_command",
    "finish_run",
    "ingest_driver_batches",
    "ingest_driver_events",
    "issue_model_grant",
    "mark_disconnected",
    "mark_ready",
    "mark_stopped",
    "read_events",
    "record_heartbeat",
    "record_marks",
    "register_driver",
    "resolve_model_grant",
    "set_session_status",
    "sweep_lost_drivers",
    "undelivered_commands",
]
