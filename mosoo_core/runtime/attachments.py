"""Attachments into a sandbox: the files a message names appear at
`/mnt/attachments/<file_id>/<name>` for that message's run only, read-only for the agent.

The worker writes them into the sandbox's attachments folder on the host (see
`SandboxBackend.attachments_dir`), which every process in the sandbox sees through a
read-only mount: files 0444 in 0555 folders, so the sandbox user can neither change nor
delete them, and a Pet sandbox that outlives the run sees them arrive and go without a new
mount. Bytes stream from the store in chunks; nothing is held whole in memory."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from mosoo_core.db import session_scope
from mosoo_core.files.store import ObjectStore, get_store, iter_chunks
from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox import (
    ATTACHMENTS_DIR,
    SandboxBackend,
    SandboxError,
    SandboxRef,
    remove_read_only_tree,
)
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, SessionRun

log = get_logger(__name__)

# Exits non-zero naming the first path the sandbox user cannot read.
_CHECK_READABLE = 'for p; do [ -r "$p" ] || { printf "%s" "$p"; exit 1; }; done'


def attachment_path(file_id: str, name: str) -> str:
    return f"{ATTACHMENTS_DIR}/{file_id}/{name}"


def deliver_attachments(
    backend: SandboxBackend, ref: SandboxRef, run_id: str
) -> list[dict[str, Any]]:
    """Put the run's attachments into the sandbox and return the `input.start` manifest
    [{file_id, name, mime_type, size, path}]. A file deleted since the message was sent is
    left out. SandboxError when a file cannot be delivered or is not readable inside."""
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        named = [str(item.get("file_id", "")) for item in (run.attachments if run else [])]
        if not named:
            return []
        found = db.exec(select(StoredFile).where(col(StoredFile.id).in_(named))).all()
        rows = {row.id: row for row in found}
    folder = backend.attachments_dir(ref)
    store = get_store()
    manifest: list[dict[str, Any]] = []
    for file_id in named:
        row = rows.get(file_id)
        if row is None or row.status != "ready":
            log.warning("file.attachment_gone", run_id=run_id, file_id=file_id)
            continue
        try:
            _write(store, row.object_key, folder / row.id, row.name)
        except (OSError, ValueError) as error:
            raise SandboxError(f"could not deliver the attachment {row.name}: {error}") from error
        except Exception as error:  # the S3 client's own errors
            raise SandboxError(
                f"could not read the attachment {row.name} from the store: {error}"
            ) from error
        manifest.append(
            {
                "file_id": row.id,
                "name": row.name,
                "mime_type": row.media_type,
                "size": row.size,
                "path": attachment_path(row.id, row.name),
            }
        )
    if manifest:
        paths = [item["path"] for item in manifest]
        result = backend.exec(ref, ["sh", "-c", _CHECK_READABLE, "sh", *paths], timeout=60)
        if result.exit_code != 0:
            raise SandboxError(
                f"the attachment {result.stdout_text or paths[0]} is not visible in the sandbox"
            )
    log.info("run.attachments_delivered", run_id=run_id, count=len(manifest))
    return manifest


def _write(store: ObjectStore, key: str, folder: Path, name: str) -> None:
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        raise ValueError(
            f"unsafe attachment name {name!r}"
        )  # names are sanitized on upload; never trust a row
    if folder.exists():
        remove_read_only_tree(folder)  # a retried dispatch starts over
    folder.mkdir()
    folder.chmod(0o755)  # whatever the umask, until it is sealed below
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".incoming-")
    try:
        with os.fdopen(fd, "wb") as target:
            for chunk in iter_chunks(store.open(key)):
                target.write(chunk)
            os.fchmod(target.fileno(), 0o444)
        os.replace(temporary, folder / name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    folder.chmod(0o555)


def remove_attachments(backend: SandboxBackend, ref: SandboxRef, file_ids: Iterable[str]) -> int:
    """Take a run's attachments out of a sandbox that outlives the run (Pet). Returns how many
    went; failures are logged, never raised (the next delivery of the file replaces it)."""
    try:
        folder = backend.attachments_dir(ref)
    except SandboxError:
        return 0
    removed = 0
    for file_id in file_ids:
        if not file_id or "/" in file_id or file_id.startswith("."):
            continue
        target = folder / file_id
        try:
            if target.exists():
                remove_read_only_tree(target)
                removed += 1
        except OSError as error:
            log.warning("file.attachment_remove_failed", file_id=file_id, error=str(error)[:300])
    return removed


def remove_stale_attachments(backend: SandboxBackend, ref: SandboxRef) -> int:
    """Take out of a shared (Pet) sandbox the attachments of runs that are over but were never
    cleaned up after (a run failed without its driver, a worker died): they were meant for one
    message only. Attachments of runs still active stay."""
    try:
        folder = backend.attachments_dir(ref)
    except SandboxError:
        return 0
    present = [entry.name for entry in folder.iterdir() if not entry.name.startswith(".")]
    if not present:
        return 0
    with session_scope() as db:
        active = set(
            db.exec(
                select(StoredFile.id)
                .join(SessionRun, SessionRun.id == StoredFile.run_id)  # type: ignore[arg-type]
                .where(
                    col(StoredFile.id).in_(present), col(SessionRun.status).in_(ACTIVE_RUN_STATUSES)
                )
            ).all()
        )
    return remove_attachments(backend, ref, [name for name in present if name not in active])
