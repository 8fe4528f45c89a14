"""SQLite's log checkpointed by a thread (`mosoo_core.wal`), as control runs it: commits no
longer copy the log into the database, the thread does, and under writes that never pause
the log is still started over rather than growing without end."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from mosoo_core import wal
from mosoo_core.db import dispose_engines, get_engine, make_engine

ROW = "x" * 4000  # about a page a row


def _engine(tmp_path: Path) -> sa.Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'wal.db'}")
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)"))
    return engine


def _write(engine: sa.Engine, commits: int, rows: int = 25) -> None:
    for _ in range(commits):
        with engine.begin() as connection:
            connection.execute(
                sa.text("INSERT INTO t (body) VALUES (:body)"), [{"body": ROW}] * rows
            )


def _log_bytes(tmp_path: Path) -> int:
    return (tmp_path / "wal.db-wal").stat().st_size


def _count(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        return int(connection.execute("SELECT count(*) FROM t").fetchone()[0])


def test_commits_leave_the_log_to_the_thread_which_copies_it_all(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    checkpointer = wal.checkpoint_in_a_thread(engine, every=3600)  # passes only when asked
    assert checkpointer is not None
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        _write(engine, commits=80)  # 2,000 pages: past SQLite's 1,000, nothing copied them
        assert _log_bytes(tmp_path) > 1500 * 4096
        frames, copied = checkpointer.checkpoint()
        assert frames >= 2000 and copied == frames
        assert checkpointer.passes == 1 and checkpointer.restarts == 0
    finally:
        checkpointer.stop()
        engine.dispose()
    assert _count(tmp_path / "wal.db") == 2000


def test_without_the_thread_commits_checkpoint_as_sqlite_does(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
    _write(engine, commits=80)
    assert _log_bytes(tmp_path) < 1500 * 4096  # restarted by the commits' own checkpoints
    engine.dispose()


def test_the_thread_checkpoints_on_its_own_and_once_more_when_stopped(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    checkpointer = wal.checkpoint_in_a_thread(engine, every=0.02)
    assert checkpointer is not None
    _write(engine, commits=10)
    deadline = time.monotonic() + 10
    while checkpointer.passes < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpointer.passes >= 3
    _write(engine, commits=2)
    checkpointer.stop()
    assert not checkpointer._thread or not checkpointer._thread.is_alive()
    # The last pass copied the last commits: the database file alone holds every row.
    engine.dispose()
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "wal.db").read_bytes())
    assert _count(copy) == 300


def test_a_log_past_the_limit_starts_over_while_writes_keep_coming(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    checkpointer = wal.checkpoint_in_a_thread(engine, every=0.01, restart_frames=200)
    assert checkpointer is not None
    stop = threading.Event()
    written = [0]

    def write_without_pause() -> None:
        while not stop.is_set():
            _write(engine, commits=1, rows=10)
            written[0] += 10
            time.sleep(0.001)  # control's writer, too, has a moment between two groups

    writer = threading.Thread(target=write_without_pause)
    writer.start()
    try:
        deadline = time.monotonic() + 20
        while (checkpointer.restarts < 2 or written[0] < 4000) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        writer.join()
        checkpointer.stop()
    assert checkpointer.restarts >= 2
    # Over 4,000 pages written; the log was started over instead of holding them all.
    assert written[0] >= 4000
    assert _log_bytes(tmp_path) < written[0] * 4096 / 2
    engine.dispose()
    assert _count(tmp_path / "wal.db") == written[0]


def test_only_a_sqlite_file_gets_a_thread() -> None:
    assert wal.checkpoint_in_a_thread(sa.create_engine("sqlite://")) is None
    postgres = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert wal.checkpoint_in_a_thread(postgres) is None


def test_control_serves_with_its_commits_checkpointed_by_the_thread_and_a_short_gil_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mosoo_core.control import server

    seen: dict[str, object] = {}

    async def serving() -> None:
        with get_engine().connect() as connection:
            seen["autocheckpoint"] = connection.exec_driver_sql(
                "PRAGMA wal_autocheckpoint"
            ).scalar()
        seen["threads"] = [thread.name for thread in threading.enumerate()]
        seen["switch"] = sys.getswitchinterval()

    monkeypatch.setattr(server, "_serve_all", serving)
    try:
        server.serve()
    finally:
        dispose_engines()
    assert seen["autocheckpoint"] == 0
    assert seen["switch"] == server.GIL_SWITCH_SECONDS != sys.getswitchinterval()
    assert "wal-checkpointer" in seen["threads"]  # type: ignore[operator]
    assert "wal-checkpointer" not in [thread.name for thread in threading.enumerate()]
