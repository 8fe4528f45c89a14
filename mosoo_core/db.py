"""Engine and session factory; one Alembic chain creates the tables (`mosoo migrate`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from mosoo_core.settings import Settings, get_settings


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Stores UTC, returns timezone-aware UTC on SQLite and PostgreSQL alike."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Any) -> Callable[[datetime | None], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        # SQLite keeps text. SQLAlchemy's DATETIME writes "%04d-%02d-%02d %02d:%02d:%02d.%06d"
        # from a dict built per value, after process_bind_param's conversion: 2.8 µs a value,
        # and control's event writer binds one per event. `isoformat` writes the same text
        # (tests/unit/test_db_types.py) in 1.2 µs; the "+00:00" it adds is cut off.
        convert = self.process_bind_param

        def process(value: datetime | None) -> str | None:
            if value is not None and value.tzinfo is not UTC:
                value = convert(value, dialect)  # refuses naive values
            return None if value is None else value.isoformat(" ", "microseconds")[:26]

        return process

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_engines: dict[str, Engine] = {}
_default_engine: tuple[Settings, Engine] | None = None
# Web's thread pool runs up to 40 units of work at once; SQLite connections are cheap to keep.
SQLITE_POOL_SIZE = 20


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # A pool as large as the threads that use it at once: past `pool_size` each checkout
        # opens a connection (and runs the pragmas below) and closes it again on return.
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=SQLITE_POOL_SIZE,
            max_overflow=SQLITE_POOL_SIZE,
        )

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across crashes, fewer fsyncs
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def get_engine(url: str | None = None) -> Engine:
    global _default_engine
    if url is None:
        # Every unit of work asks for it: resolving the default SQLite path each time cost
        # a few system calls per session.
        settings = get_settings()
        if _default_engine is not None and _default_engine[0] is settings:
            return _default_engine[1]
        engine = get_engine(settings.resolved_database_url)
        _default_engine = (settings, engine)
        return engine
    if url not in _engines:
        _engines[url] = make_engine(url)
    return _engines[url]


def dispose_engines() -> None:
    global _default_engine
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()
    _default_engine = None


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """A unit of work: commits on success, rolls back on error (see `commit_refusal` for
    the refusals whose bookkeeping must survive that rollback)."""
    with Session(engine or get_engine(), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


# What a function that only runs Core statements (columns, not ORM rows) takes: a Session, or
# the plain Connection of `connection_scope`.
Connectable = Session | sa.Connection


@contextmanager
def connection_scope(engine: Engine | None = None) -> Iterator[sa.Connection]:
    """`session_scope` without the ORM, for units of work of Core statements only: an ORM
    session costs more CPU to open and close than the API's most frequent reads take."""
    with (engine or get_engine()).connect() as connection:
        yield connection
        connection.commit()  # an error instead closes it, which rolls back


def commit_refusal(db: Session, error: BaseException) -> NoReturn:
    """Record, then refuse: commit what this unit of work has written so far, then raise.

    For rules whose refusal must leave a trace (a wrong sign-in code uses up a try, a failed
    verification counts against the throttle, a boot token presented once is burned):
    raising alone would let the unit of work's rollback undo the very counter that enforces
    the rule, as a brute-forced sign-in code once showed. The commit happens here, at the
    refusal, rather than in `session_scope`, so it holds whatever the front door does with
    the error afterwards (translate it, catch it, wrap it). Write only the refusal's
    bookkeeping before calling this."""
    db.commit()
    raise error


Row = TypeVar("Row")


def insert_unless_raced(db: Session, row: Row, existing: Callable[[], Row | None]) -> Row:
    """Insert `row`, or, when another transaction inserted its unique twin first (the
    IntegrityError of a unique index, undone in a savepoint), return that one, `existing()`.
    For rows that two requests may both find missing and make at once."""
    try:
        with db.begin_nested():
            db.add(row)
            db.flush()
    except sa.exc.IntegrityError:
        found = existing()
        if found is None:  # not a twin: some other constraint refused the row
            raise
        return found
    return row


def check_database(engine: Engine | None = None) -> None:
    with (engine or get_engine()).connect() as connection:
        connection.execute(sa.text("SELECT 1"))
