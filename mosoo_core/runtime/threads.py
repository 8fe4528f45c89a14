"""Deleting a thread everywhere: its database rows, its file objects and checkpoints in the
object store, and its Cattle sandbox. The one call every front door makes."""

from __future__ import annotations

from mosoo_core import sessions, streams
from mosoo_core.db import session_scope
from mosoo_core.files import checkpoint_prefix, get_store, purge_objects
from mosoo_core.logs import get_logger
from mosoo_core.runtime.labels import installation_label
from mosoo_core.runtime.sandbox import (
    LABEL_DRIVER_INSTANCE,
    LABEL_SUBJECT,
    SandboxBackend,
    SandboxError,
    get_backend,
)

log = get_logger(__name__)


def remove_thread_sandboxes(
    deleted: sessions.DeletedThread, backend: SandboxBackend | None = None
) -> int:
    """Remove the thread's Cattle sandboxes (a Pet sandbox is the Agent's and stays; the
    thread's driver inside it was told to stop). What a failure leaves, `sweep_sandboxes` removes."""
    if not deleted.driver_instance_ids:
        return 0  # no driver ever ran for it: nothing to look for (and no backend to start)
    backend = backend or get_backend()
    selectors = [{LABEL_SUBJECT: deleted.subject, **installation_label()}]
    selectors += [
        {LABEL_DRIVER_INSTANCE: instance_id} for instance_id in deleted.driver_instance_ids
    ]
    removed = 0
    seen: set[str] = set()
    for labels in selectors:
        for ref in backend.list_by_label(labels):
            if ref.labels.get(LABEL_SUBJECT, "").startswith("agent:") or ref.id in seen:
                continue
            seen.add(ref.id)
            try:
                backend.remove(ref)
                removed += 1
            except SandboxError as error:
                log.warning(
                    "thread.sandbox_remove_failed",
                    thread_id=deleted.thread_id,
                    error=str(error)[:300],
                )
    return removed


def delete_thread_everywhere(
    account_id: str, thread_id: str, backend: SandboxBackend | None = None
) -> sessions.DeletedThread:
    """Delete a thread for good. An active run is stopped first; then the rows (committed, so
    nothing new starts on it), the file objects no other row uses, its checkpoints and its
    sandbox. NotFound when the account does not own it."""
    with session_scope() as db:
        sessions.get_session(db, account_id, thread_id)
        events = sessions.cancel_active_run(db, account_id, thread_id)
    streams.publish_events(events)
    with session_scope() as db:
        deleted = sessions.delete_thread(db, account_id, thread_id)
    for instance_id in deleted.live_driver_instance_ids:
        streams.notify_driver(instance_id)  # deliver `session.stop` now
    purged = purge_objects(deleted.object_keys)
    checkpoints = get_store().delete_prefix(checkpoint_prefix(deleted.app_id, deleted.thread_id))
    sandboxes = remove_thread_sandboxes(deleted, backend)
    log.info(
        "thread.deleted",
        thread_id=thread_id,
        objects=purged,
        checkpoints=checkpoints,
        sandboxes=sandboxes,
    )
    return deleted
