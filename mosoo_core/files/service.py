"""File records for front doors and the runtime: attachments callers upload and artifacts the
agent writes. Bytes live in the object store under `{app_id}/blobs/sha256/{digest}` (one
object per distinct content per App); rows point at them, so an object goes only when no row
references its key any more."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

from mosoo_core.clock import utcnow
from mosoo_core.db import get_engine
from mosoo_core.errors import InvalidInput, NotFound, PayloadTooLarge
from mosoo_core.files.names import media_type_for, sanitize_name
from mosoo_core.files.store import CHUNK, get_store
from mosoo_core.logs import get_logger
from mosoo_core.ownership import owned_agent, owned_app, owned_thread
from mosoo_core.settings import get_settings
from mosoo_core.tables.files import FILE_KINDS, StoredFile

log = get_logger(__name__)

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ATTACHMENTS_PER_THREAD = 100
MAX_ATTACHMENTS_PER_MESSAGE = 20
MAX_LIST_LIMIT = 1000


@dataclass(frozen=True)
class FileView:
    id: str
    app_id: str
    agent_id: str
    session_id: str | None
    run_id: str | None
    kind: str
    status: str
    name: str
    path: str
    media_type: str
    size: int
    sha256: str
    created_at: datetime
    updated_at: datetime

    def to_public(self) -> dict[str, Any]:
        """The shape API responses and events carry (threads are "threads" publicly; the
        object key stays private)."""
        return {
            "id": self.id,
            "agent_id": self.agent_id,
            "thread_id": self.session_id,
            "run_id": self.run_id,
            "kind": self.kind,
            "status": self.status,
            "name": self.name,
            "path": self.path,
            "media_type": self.media_type,
            "size": self.size,
            "sha256": self.sha256,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def file_view(row: StoredFile) -> FileView:
    return FileView(
        id=row.id,
        app_id=row.app_id,
        agent_id=row.agent_id,
        session_id=row.session_id,
        run_id=row.run_id,
        kind=row.kind,
        status=row.status,
        name=row.name,
        path=row.path,
        media_type=row.media_type,
        size=row.size,
        sha256=row.sha256,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def blob_key(app_id: str, digest: str) -> str:
    return f"{app_id}/blobs/sha256/{digest}"


# --- storing bytes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Spooled:
    """Bytes read into a temporary file while being hashed and counted."""

    path: Path
    size: int
    sha256: str


def spool_dir() -> Path:
    folder = get_settings().data_dir.resolve() / "tmp" / "files"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def spool(source: IO[bytes], limit: int = MAX_FILE_BYTES) -> Spooled:
    """Copy `source` to a temporary file, hashing and counting as it goes; PayloadTooLarge as
    soon as it passes `limit` (so a huge upload is never read to its end)."""
    fd, name = tempfile.mkstemp(dir=spool_dir(), prefix="upload-")
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as target:
            while chunk := source.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(
                        f"Files are limited to {limit // (1024 * 1024)} MiB each."
                    )
                digest.update(chunk)
                target.write(chunk)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise
    return Spooled(Path(name), size, digest.hexdigest())


def store_spooled(app_id: str, spooled: Spooled) -> str:
    """Put spooled bytes at their content address (skipped when the object is there) and
    remove the temporary file. Returns the object key."""
    key = blob_key(app_id, spooled.sha256)
    try:
        store = get_store()
        if not store.exists(key):
            with open(spooled.path, "rb") as handle:
                store.put(key, handle)
    finally:
        with contextlib.suppress(FileNotFoundError):
            spooled.path.unlink()
    return key


# --- ownership -------------------------------------------------------------------------------


def _owned_file(db: Session, account_id: str, file_id: str) -> StoredFile:
    row = db.get(StoredFile, file_id) if file_id else None
    if row is None or row.status == "deleting":
        raise NotFound("File not found.")
    try:
        owned_app(db, account_id, row.app_id)
    except NotFound:
        raise NotFound("File not found.") from None
    return row


def _thread_attachment_count(db: Session, session_id: str) -> int:
    return int(
        db.exec(
            select(func.count())
            .select_from(StoredFile)
            .where(StoredFile.session_id == session_id, StoredFile.kind == "attachment")
        ).one()
    )


# --- front-door operations -------------------------------------------------------------------


def upload_file(
    db: Session,
    account_id: str,
    app_id: str,
    agent_id: str,
    source: IO[bytes],
    filename: str,
    media_type: str | None = None,
    *,
    session_id: str | None = None,
) -> FileView:
    """Store an attachment for an Agent of the account's App, optionally already on one of
    its threads. Streams (never holds the file in memory), refuses more than 64 MiB
    (PayloadTooLarge) and unusable names (InvalidInput, field "name"); a thread holds at most
    100 attachments. Identical content is stored once per App."""
    owned_agent(db, account_id, app_id, agent_id)
    name = sanitize_name(filename)
    if session_id is not None:
        thread = owned_thread(db, account_id, session_id)
        if thread.agent_id != agent_id:
            raise NotFound("Thread not found.")
        if _thread_attachment_count(db, thread.id) >= MAX_ATTACHMENTS_PER_THREAD:
            raise InvalidInput(
                f"A thread holds at most {MAX_ATTACHMENTS_PER_THREAD} attachments.", field="file"
            )
    spooled = spool(source)
    key = store_spooled(app_id, spooled)
    row = StoredFile(
        app_id=app_id,
        agent_id=agent_id,
        session_id=session_id,
        kind="attachment",
        status="ready",
        name=name,
        media_type=media_type_for(name, media_type),
        size=spooled.size,
        sha256=spooled.sha256,
        object_key=key,
    )
    db.add(row)
    db.flush()
    log.info("file.uploaded", file_id=row.id, app_id=app_id, agent_id=agent_id, size=row.size)
    return file_view(row)


def list_files(
    db: Session,
    account_id: str,
    app_id: str,
    *,
    session_id: str | None = None,
    kind: str | None = None,
    query: str | None = None,
    ids: Sequence[str] | None = None,
    limit: int = 200,
) -> list[FileView]:
    """The App's files, newest first; filter by thread, kind, a name search or ids."""
    owned_app(db, account_id, app_id)
    if kind is not None and kind not in FILE_KINDS:
        raise InvalidInput("kind must be attachment or artifact.", field="kind")
    if not (1 <= limit <= MAX_LIST_LIMIT):
        raise InvalidInput(f"limit must be between 1 and {MAX_LIST_LIMIT}.", field="limit")
    statement = select(StoredFile).where(
        StoredFile.app_id == app_id, StoredFile.status != "deleting"
    )
    if session_id is not None:
        thread = owned_thread(db, account_id, session_id)
        if thread.app_id != app_id:
            raise NotFound("Thread not found.")
        statement = statement.where(StoredFile.session_id == session_id)
    if kind is not None:
        statement = statement.where(StoredFile.kind == kind)
    if query and query.strip():
        pattern = (
            "%" + query.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        )
        statement = statement.where(
            sa.or_(
                col(StoredFile.name).ilike(pattern, escape="\\"),
                col(StoredFile.path).ilike(pattern, escape="\\"),
            )
        )
    if ids is not None:
        statement = statement.where(col(StoredFile.id).in_(list(ids)))
    statement = statement.order_by(
        col(StoredFile.created_at).desc(), col(StoredFile.id).desc()
    ).limit(limit)
    return [file_view(row) for row in db.exec(statement).all()]


def list_thread_files(
    db: Session, account_id: str, session_id: str, *, ids: Sequence[str] | None = None
) -> list[FileView]:
    """A thread's attachments and artifacts, oldest first (the order they appeared)."""
    thread = owned_thread(db, account_id, session_id)
    statement = select(StoredFile).where(
        StoredFile.session_id == thread.id, StoredFile.status != "deleting"
    )
    if ids is not None:
        statement = statement.where(col(StoredFile.id).in_(list(ids)))
    statement = statement.order_by(col(StoredFile.created_at), col(StoredFile.id))
    return [file_view(row) for row in db.exec(statement).all()]


def get_file(db: Session, account_id: str, file_id: str) -> FileView:
    return file_view(_owned_file(db, account_id, file_id))


def open_file(db: Session, account_id: str, file_id: str) -> tuple[FileView, IO[bytes]]:
    """The file and a stream of its bytes (read it with `iter_chunks`, which closes it)."""
    row = _owned_file(db, account_id, file_id)
    store = get_store()
    if row.status != "ready" or not store.exists(row.object_key):
        raise NotFound("The content of this file is not available.")
    return file_view(row), store.open(row.object_key)


def delete_file(
    db: Session, account_id: str, file_id: str, *, session_id: str | None = None
) -> None:
    """Delete a file record; with session_id, only a file of that thread (NotFound otherwise).
    Its object goes from the store after the caller commits, if no other row uses it."""
    row = _owned_file(db, account_id, file_id)
    if session_id is not None and row.session_id != session_id:
        raise NotFound("File not found.")
    key = row.object_key
    db.delete(row)
    db.flush()
    purge_after_commit(db, [key])


def bind_attachments(
    db: Session, thread: Any, run_id: str, file_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """Bind the attachments a message names to its thread and run (what send_message calls).
    Returns the run's manifest [{file_id, name, media_type, size}]. Each must be a ready
    attachment of the thread's Agent (NotFound otherwise, also for other owners'), not bound
    to another thread; a message names at most 20, a thread holds at most 100."""
    wanted = list(dict.fromkeys(str(file_id) for file_id in file_ids))
    if not wanted:
        return []
    if len(wanted) > MAX_ATTACHMENTS_PER_MESSAGE:
        raise InvalidInput(
            f"A message can name at most {MAX_ATTACHMENTS_PER_MESSAGE} files.", field="file_ids"
        )
    rows = {
        row.id: row
        for row in db.exec(select(StoredFile).where(col(StoredFile.id).in_(wanted))).all()
    }
    for file_id in wanted:
        row = rows.get(file_id)
        if (
            row is None
            or row.app_id != thread.app_id
            or row.agent_id != thread.agent_id
            or row.kind != "attachment"
            or row.status == "deleting"
        ):
            raise NotFound(f"File {file_id} not found.")
        if row.session_id is not None and row.session_id != thread.id:
            raise InvalidInput(f"File {file_id} belongs to another thread.", field="file_ids")
        if row.status != "ready":
            raise InvalidInput(f"File {file_id} is not ready yet.", field="file_ids")
    new = sum(1 for file_id in wanted if rows[file_id].session_id is None)
    if new and _thread_attachment_count(db, thread.id) + new > MAX_ATTACHMENTS_PER_THREAD:
        raise InvalidInput(
            f"A thread holds at most {MAX_ATTACHMENTS_PER_THREAD} attachments.", field="file_ids"
        )
    now = utcnow()
    manifest = []
    for file_id in wanted:
        row = rows[file_id]
        row.session_id, row.run_id, row.updated_at = thread.id, run_id, now
        db.add(row)
        manifest.append(
            {"file_id": row.id, "name": row.name, "media_type": row.media_type, "size": row.size}
        )
    db.flush()
    return manifest


# --- removal ---------------------------------------------------------------------------------


def _unreferenced(db: Session, keys: Iterable[str]) -> list[str]:
    keys = sorted({key for key in keys if key})
    if not keys:
        return []
    used = set(
        db.exec(select(StoredFile.object_key).where(col(StoredFile.object_key).in_(keys))).all()
    )
    return [key for key in keys if key not in used]


def remove_thread_files(db: Session, session_id: str) -> list[str]:
    """Delete a thread's file rows; returns the object keys no row references any more. The
    caller commits, then calls `purge_objects` with them. No ownership check: the caller
    (thread deletion) has made it."""
    rows = db.exec(select(StoredFile).where(StoredFile.session_id == session_id)).all()
    keys = [row.object_key for row in rows]
    for row in rows:
        db.delete(row)
    db.flush()
    return _unreferenced(db, keys)


def agent_object_keys(db: Session, agent_id: str) -> list[str]:
    """The object keys an Agent's files use (its rows go with the Agent by cascade); give them
    to `purge_objects` once the deletion is committed."""
    return sorted(
        set(db.exec(select(StoredFile.object_key).where(StoredFile.agent_id == agent_id)).all())
    )


def purge_objects(keys: Iterable[str], *, engine: Engine | None = None) -> int:
    """Delete objects from the store, each only if no row references its key (checked again
    here, against what is committed). Returns how many were deleted."""
    keys = sorted({key for key in keys if key})
    if not keys:
        return 0
    with Session(engine or get_engine()) as db:
        unused = _unreferenced(db, keys)
    store = get_store()
    deleted = 0
    for key in unused:
        try:
            store.delete(key)
            deleted += 1
        except Exception as error:  # a store hiccup leaves an orphan, never a broken row
            log.warning("file.purge_failed", key=key, error=str(error)[:300])
    return deleted


UNBOUND_UPLOAD_TTL = timedelta(hours=24)
STALE_SPOOL_AFTER = timedelta(hours=1)


def sweep_files(db: Session, *, now: datetime | None = None) -> int:
    """Remove what nothing will use: uploads no message named within a day (a composer chip
    dropped by "New chat", an API upload never sent) and temporary spool files a crashed
    upload left behind. Objects go after the caller commits. Returns how much was removed."""
    now = now or utcnow()
    rows = db.exec(
        select(StoredFile).where(
            StoredFile.kind == "attachment",
            col(StoredFile.session_id).is_(None),
            StoredFile.created_at < now - UNBOUND_UPLOAD_TTL,
        )
    ).all()
    keys = [row.object_key for row in rows]
    for row in rows:
        db.delete(row)
    db.flush()
    purge_after_commit(db, keys)
    removed = len(rows)
    cutoff = time.time() - STALE_SPOOL_AFTER.total_seconds()  # spool files age by the wall clock
    for path in spool_dir().glob("upload-*"):
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    if removed:
        log.info("files.swept", unbound_uploads=len(rows), removed=removed)
    return removed


def purge_after_commit(db: Session, keys: Iterable[str]) -> None:
    """Purge `keys` once `db` commits. Should it roll back instead, a later commit purges
    nothing wrongly: `purge_objects` keeps every key a committed row still references."""
    keys = [key for key in keys if key]
    if not keys:
        return
    bind = db.get_bind()
    engine = bind if isinstance(bind, Engine) else None

    def purge(_session: Session) -> None:
        purge_objects(keys, engine=engine)

    sa.event.listen(db, "after_commit", purge, once=True)
