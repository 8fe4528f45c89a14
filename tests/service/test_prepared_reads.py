"""`mosoo_core.prepared.PreparedRead` (the reads API clients poll, run by the database driver
directly) gives the same columns, values and types as SQLAlchemy's own execution of the same
statement, on both databases and for a driver that takes named parameters; a missing row is
None (or NoResultFound); a driver error is SQLAlchemy's class for it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import bindparam
from sqlmodel import Session

from mosoo_core import sessions
from mosoo_core.identity import _tokens, create_access_token, list_apps, sign_in_identity
from mosoo_core.identity._secrets import token_digest
from mosoo_core.migrations import upgrade
from mosoo_core.prepared import PreparedRead
from mosoo_core.sessions import actions
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.usage import UsageNumbers, record_usage, reports

STARTED = datetime(2026, 12, 7, 3, 47, 7, 538220, tzinfo=UTC)


def _fixture(db: Session) -> dict[str, dict[str, Any]]:
    """A token, a thread with a failed run (an error, a flag, timestamps with and without
    microseconds) and its usage: the parameters of each real prepared read."""
    account = sign_in_identity(db, provider="email", subject="p@example.com", email="p@example.com")
    app_id = list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="Reader", model="m")
    db.add(agent)
    db.flush()
    thread = sessions.create_session(db, account.id, app_id, agent.id)
    run = SessionRun(
        session_id=thread.id,
        app_id=app_id,
        status="failed",
        input_text="Hello",
        error_code="provider_error",
        error_message='The provider said "no" \u2014 \U0001f600',
        error_retryable=True,
        created_at=STARTED,
        started_at=STARTED.replace(microsecond=0),
        finished_at=STARTED + timedelta(seconds=5),
    )
    db.add(run)
    db.flush()
    for call in range(2):
        record_usage(
            db,
            app_id=app_id,
            provider="openai",
            model="m",
            numbers=UsageNumbers(input_tokens=100 + call, output_tokens=7, cached_input_tokens=3),
            agent_id=agent.id,
            session_id=thread.id,
            run_id=run.id,
            at=STARTED + timedelta(seconds=call),
        )
    token = create_access_token(db, account.id, "reader")
    db.commit()
    return {
        "token": {"digest": token_digest(token.secret)},
        "thread": {"account_id": account.id, "thread_id": thread.id},
        "sums": {"run_id": run.id, "day": STARTED.date()},
    }


READS = {
    "token": _tokens._BY_DIGEST,
    "thread": actions._THREAD_WITH_LATEST_RUN,
    "sums": reports._RUN_SUMS,
}


def _same_as_sqlalchemy(db: Session, read: PreparedRead, params: dict[str, Any]) -> Any:
    ours = read.first(db, params)
    theirs = db.execute(read.statement, params).first()
    assert ours is not None and theirs is not None
    assert ours._fields == tuple(theirs._mapping.keys())
    assert tuple(ours) == tuple(theirs)
    assert [type(value) for value in ours] == [type(value) for value in theirs]
    return ours


@pytest.mark.parametrize("name", list(READS))
def test_a_prepared_read_answers_what_sqlalchemy_answers(db: Session, name: str) -> None:
    params = _fixture(db)[name]
    row = _same_as_sqlalchemy(db, READS[name], params)
    if name == "thread":
        assert row.run_error_retryable is True and row.run_created_at == STARTED
        assert row.run_error_message == 'The provider said "no" \u2014 \U0001f600'
    if name == "sums":
        assert row[0] == 2 and row[1] == 201  # two calls, 100 + 101 input tokens


def test_a_missing_row_is_none_and_one_refuses_it(db: Session) -> None:
    params = _fixture(db)
    other = {**params["thread"], "account_id": "0" * 26}  # another owner's id: no row
    assert actions._THREAD_WITH_LATEST_RUN.first(db, other) is None
    with pytest.raises(sa.exc.NoResultFound):
        _tokens._BY_DIGEST.one(db, {"digest": "f" * 64})


def test_a_driver_error_is_sqlalchemys_class_and_the_connection_goes_on(db: Session) -> None:
    broken = PreparedRead(sa.select(sa.column("id")).select_from(sa.table("no_such_table")))
    with pytest.raises(sa.exc.DBAPIError) as refused:
        broken.first(db, {})
    assert isinstance(refused.value, sa.exc.OperationalError | sa.exc.ProgrammingError)
    db.rollback()
    params = _fixture(db)
    _same_as_sqlalchemy(db, actions._THREAD_WITH_LATEST_RUN, params["thread"])


def test_a_driver_with_named_parameters_reads_the_same(tmp_path: Path) -> None:
    """psycopg takes `%(name)s` and SQLite `?` by default: SQLite made to take `:name`."""
    url = f"sqlite:///{tmp_path / 'named.db'}"
    upgrade(url)
    engine = sa.create_engine(url, paramstyle="named")
    try:
        with Session(engine) as db:
            params = _fixture(db)
            for name, read in READS.items():
                _same_as_sqlalchemy(db, read, params[name])
            # A statement's own values (LIMIT 1) and the caller's, several times over.
            double = PreparedRead(
                sa.select(sa.literal(5).label("five"), bindparam("x", type_=sa.Integer) * 2)
            )
            assert tuple(double.one(db, {"x": 21})) == (5, 42)
    finally:
        engine.dispose()
