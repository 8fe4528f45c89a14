"""SQLite's write-ahead log, copied back into the database by a thread of its own.

By default the connection whose commit takes the log past 1,000 pages checkpoints it there
and then: it copies the log into the database and syncs both files, inside that commit.
Control's event writer makes most of the commits, so a group of events waited on two fsyncs
every few groups (`bench/events.py --writer`: the commit was a third of the writer's time,
and the slowest groups were the ones that checkpointed). In control the connections leave
checkpoints to a `Checkpointer` instead: a thread with a connection of its own copies what
was committed, a passive checkpoint every `every` seconds, which neither waits for nor
holds up a writer or a reader.

A passive checkpoint cannot start the log over while commits keep coming (the log restarts
only when a transaction begins with every frame copied), so under a load that never
pauses the log would grow without end. Past `restart_frames` the thread asks for a
restart checkpoint: it waits for the writer's current transaction (no longer than
`RESTART_WAIT_MS`), copies the few frames the passive ones left, and the next commit
starts the log over. That holds a commit up once per `restart_frames` pages written, not
every few commits. Other processes keep SQLite's default: the log stays short, so their
commits seldom checkpoint, and if this thread stops they do it again.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mosoo_core.logs import get_logger

log = get_logger(__name__)
CHECKPOINT_SECONDS = 0.25
RESTART_FRAMES = 16_384  # 64 MiB of the log at SQLite's 4 KiB pages
RESTART_WAIT_MS = 200  # how long a restart waits for the writer's transaction or a reader


class Checkpointer:
    """`start()` the thread, `stop()` it; `checkpoint()` is one pass (the thread's step)."""

    def __init__(
        self,
        path: str,
        *,
        every: float = CHECKPOINT_SECONDS,
        restart_frames: int = RESTART_FRAMES,
    ) -> None:
        self.path = path
        self.every = every
        self.restart_frames = restart_frames
        self.passes = 0
        self.restarts = 0
        self._warn_at = 4 * restart_frames  # a log this long, not started over, is logged
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._connection: sqlite3.Connection | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="wal-checkpointer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def checkpoint(self) -> tuple[int, int]:
        """One pass: copy what the log holds; start it over once it is long. Returns the
        log's frames and how many of them are now in the database."""
        connection = self._connect()
        _busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.passes += 1
        if frames >= self.restart_frames:
            busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            if not busy:
                self.restarts += 1
                self._warn_at = 4 * self.restart_frames
            elif frames >= self._warn_at:  # a reader that never lets go, most likely
                log.warning("wal.restart_refused", frames=frames, copied=copied)
                self._warn_at = 2 * frames
        return frames, copied

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            connection.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")
            self._connection = connection
        return self._connection

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.every):
                try:
                    self.checkpoint()
                except sqlite3.Error as error:  # a locked or missing file: the next pass retries
                    log.warning("wal.checkpoint_failed", error=str(error))
            self.checkpoint()  # what the last commits wrote, before the process exits
        except sqlite3.Error as error:
            log.warning("wal.checkpoint_failed", error=str(error))
        finally:
            if self._connection is not None:
                self._connection.close()


def checkpoint_in_a_thread(engine: Engine, **options: Any) -> Checkpointer | None:
    """For a SQLite file: this engine's connections stop checkpointing in their commits and a
    started `Checkpointer` does it instead (None for any other database)."""
    if engine.dialect.name != "sqlite":
        return None
    path = engine.url.database
    if not path or path == ":memory:":
        return None

    @sa.event.listens_for(engine, "connect")
    def _no_checkpoint_in_commits(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")

    engine.dispose()  # a connection opened before would still checkpoint in its commits
    checkpointer = Checkpointer(path, **options)
    checkpointer.start()
    return checkpointer
