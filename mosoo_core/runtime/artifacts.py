"""Artifacts out of a sandbox: after each run, the regular files under `/workspace/outputs`
that are new or changed for the thread become StoredFile(kind="artifact") rows, which the
runtime announces in one `session_files.updated` event.

Which thread an output belongs to: a Cattle sandbox's /workspace is the thread's own
(restored from its checkpoint), so everything there that differs from what the thread
recorded is the thread's. A Pet sandbox's /workspace is shared by all threads of the Agent:
there an output counts for a run's thread only when it was also modified since the run's
message was sent (tar mtime), so one thread's old outputs never show up on another thread.
Two runs of one Pet active at the same time can both claim a file written in that window.
"""

from __future__ import annotations

import contextlib
import tarfile
from dataclasses import dataclass
from datetime import datetime
from typing import IO, cast

from sqlmodel import select

from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.files.names import clean_name, media_type_for
from mosoo_core.files.service import (
    MAX_FILE_BYTES,
    FileView,
    Spooled,
    file_view,
    purge_objects,
    spool,
    store_spooled,
)
from mosoo_core.files.store import ChunkReader
from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox import WORKSPACE, SandboxBackend, SandboxError, SandboxRef
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import AgentSession, SessionRun

log = get_logger(__name__)

OUTPUTS_DIR = f"{WORKSPACE}/outputs"
MAX_ARTIFACTS_PER_RUN = 200
MAX_ARTIFACT_BYTES = MAX_FILE_BYTES
MAX_ARTIFACT_TOTAL_BYTES = 512 * 1024 * 1024
MAX_PATH_BYTES = 1024


@dataclass(frozen=True)
class _Output:
    path: str
    name: str
    spooled: Spooled


def output_path(member_name: str) -> str | None:
    """A tar member name as a clean path relative to outputs, or None to skip it."""
    parts = [part for part in member_name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        return None
    cleaned = [clean_name(part) for part in parts]
    if not all(cleaned):
        return None
    path = "/".join(cleaned)
    return path if len(path.encode()) <= MAX_PATH_BYTES else None


def record_artifacts(backend: SandboxBackend, ref: SandboxRef, run_id: str) -> list[FileView]:
    """Record the run's new or changed outputs for its thread and return them (what the
    caller announces in one `session_files.updated` event, only when something changed).
    Safe to run twice: what is recorded already is not returned again."""
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        thread = db.get(AgentSession, run.session_id) if run else None
        if run is None or thread is None:
            return []
        app_id, agent_id, session_id = thread.app_id, thread.agent_id, thread.id
        shared = run.snapshot.get("kind") == "pet"
        since = run.created_at if shared else None
        known = {
            row.path: row.sha256
            for row in db.exec(
                select(StoredFile).where(
                    StoredFile.session_id == session_id, StoredFile.kind == "artifact"
                )
            ).all()
        }
    if backend.exec(ref, ["test", "-d", OUTPUTS_DIR], timeout=30).exit_code != 0:
        return []
    outputs = _read_outputs(backend, ref, run_id, known, since)
    if not outputs:
        return []
    changed: list[FileView] = []
    replaced: list[str] = []
    try:
        keys = {output.path: store_spooled(app_id, output.spooled) for output in outputs}
    finally:
        for output in outputs:
            with contextlib.suppress(FileNotFoundError):
                output.spooled.path.unlink()
    with session_scope() as db:
        now = utcnow()
        for output in outputs:
            row = db.exec(
                select(StoredFile).where(
                    StoredFile.session_id == session_id,
                    StoredFile.kind == "artifact",
                    StoredFile.path == output.path,
                )
            ).first()
            if row is None:
                row = StoredFile(
                    app_id=app_id,
                    agent_id=agent_id,
                    session_id=session_id,
                    kind="artifact",
                    path=output.path,
                    name=output.name,
                )
            elif row.sha256 == output.spooled.sha256:
                continue  # recorded meanwhile (the task ran twice)
            else:
                replaced.append(row.object_key)
            row.run_id, row.status, row.name = run_id, "ready", output.name
            row.media_type = media_type_for(output.name, None)
            row.size, row.sha256, row.object_key = (
                output.spooled.size,
                output.spooled.sha256,
                keys[output.path],
            )
            row.updated_at = now
            db.add(row)
            db.flush()
            changed.append(file_view(row))
    purge_objects(replaced)
    log.info("run.artifacts_recorded", run_id=run_id, count=len(changed))
    return changed


def _read_outputs(
    backend: SandboxBackend,
    ref: SandboxRef,
    run_id: str,
    known: dict[str, str],
    since: datetime | None,
) -> list[_Output]:
    """Spool the outputs worth recording to temporary files (hashing as they stream)."""
    outputs: list[_Output] = []
    total = 0
    not_before = since.timestamp() - 1 if since is not None else None
    try:
        reader = cast(IO[bytes], ChunkReader(backend.get_archive(ref, OUTPUTS_DIR)))
        with tarfile.open(fileobj=reader, mode="r|") as archive:
            for member in archive:
                if not member.isreg():
                    continue  # links, devices, fifos: never followed, never recorded
                path = output_path(member.name)
                if path is None:
                    log.warning("run.artifact_skipped", run_id=run_id, reason="unusable name")
                    continue
                if not_before is not None and member.mtime < not_before:
                    continue  # a shared (Pet) workspace: written before this run
                if len(outputs) >= MAX_ARTIFACTS_PER_RUN:
                    log.warning(
                        "run.artifact_skipped", run_id=run_id, path=path, reason="too many files"
                    )
                    continue
                if (
                    member.size > MAX_ARTIFACT_BYTES
                    or total + member.size > MAX_ARTIFACT_TOTAL_BYTES
                ):
                    log.warning(
                        "run.artifact_skipped",
                        run_id=run_id,
                        path=path,
                        size=member.size,
                        reason="too large",
                    )
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                spooled = spool(handle)
                if known.get(path) == spooled.sha256:
                    spooled.path.unlink()
                    continue
                total += spooled.size
                outputs.append(_Output(path=path, name=path.rsplit("/", 1)[-1], spooled=spooled))
    except (SandboxError, tarfile.TarError) as error:
        # tar reports unreadable files at the end; what was read whole is kept.
        log.warning("run.artifacts_incomplete", run_id=run_id, error=str(error)[:300])
    except BaseException:
        for output in outputs:
            with contextlib.suppress(FileNotFoundError):
                output.spooled.path.unlink()
        raise
    return outputs
