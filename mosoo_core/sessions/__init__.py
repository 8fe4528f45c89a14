"""Threads (sessions), runs, the event log, driver instances and their commands.

What front doors may call; the driver-facing calls are in `sessions.driver_plane`."""

from mosoo_core.ownership import owned_thread
from mosoo_core.sessions._drivers import live_capabilities
from mosoo_core.sessions._queue import MAX_PENDING_MESSAGES
from mosoo_core.sessions.service import (
    RunView,
    Sent,
    SessionView,
    active_run,
    cancel_active_run,
    create_session,
    get_run,
    get_session,
    list_events,
    resolve_permission,
    send_message,
)
from mosoo_core.sessions.threads import (
    DeletedThread,
    ThreadRow,
    archive_thread,
    count_threads,
    delete_thread,
    get_thread,
    list_threads,
    rename_thread,
    unarchive_thread,
)
from mosoo_core.sessions.titles import auto_title
from mosoo_core.streams import StoredEvent

__all__ = [
    "MAX_PENDING_MESSAGES",
    "DeletedThread",
    "RunView",
    "Sent",
    "SessionView",
    "StoredEvent",
    "ThreadRow",
    "active_run",
    "archive_thread",
    "auto_title",
    "cancel_active_run",
    "count_threads",
    "create_session",
    "delete_thread",
    "get_run",
    "get_session",
    "get_thread",
    "list_events",
    "list_threads",
    "live_capabilities",
    "owned_thread",
    "rename_thread",
    "resolve_permission",
    "send_message",
    "unarchive_thread",
]
