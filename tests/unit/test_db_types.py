"""UTCDateTime's own SQLite text: the very text SQLAlchemy's DATETIME writes (rows written
before it, and every comparison with them, depend on it), and the UTC instant back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from mosoo_core.db import UTCDateTime

MOMENTS = [
    datetime(2026, 12, 7, 3, 47, 7, 538220, tzinfo=UTC),
    datetime(2026, 12, 7, 3, 47, 7, tzinfo=UTC),  # no microseconds: still six digits
    datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),  # a year of one digit: still four
    datetime(2026, 3, 1, 1, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]


@pytest.mark.parametrize("moment", MOMENTS)
def test_sqlite_text_is_sqlalchemys_datetime_text(moment: datetime) -> None:
    dialect = sqlite.dialect()
    ours = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    theirs = sa.DateTime().dialect_impl(dialect).bind_processor(dialect)
    assert ours is not None and theirs is not None
    utc_naive = moment.astimezone(UTC).replace(tzinfo=None)
    assert ours(moment) == theirs(utc_naive)
    assert ours(None) is None


@pytest.mark.parametrize("moment", MOMENTS)
def test_sqlite_round_trip_keeps_the_instant(moment: datetime) -> None:
    engine = sa.create_engine("sqlite://")
    table = sa.Table("t", sa.MetaData(), sa.Column("at", UTCDateTime(timezone=True)))
    with engine.begin() as connection:
        table.create(connection)
        connection.execute(table.insert(), [{"at": moment}])
        stored = connection.execute(sa.text("SELECT at FROM t")).scalar_one()
        back = connection.execute(sa.select(table.c.at)).scalar_one()
        later = connection.execute(
            sa.select(sa.func.count()).where(table.c.at <= moment, table.c.at >= moment)
        ).scalar_one()
    assert isinstance(stored, str)
    assert back == moment and back.tzinfo == UTC
    assert later == 1  # compared as text with a bound value written the same way


def test_naive_datetimes_are_still_refused() -> None:
    process = UTCDateTime().dialect_impl(sqlite.dialect()).bind_processor(sqlite.dialect())
    assert process is not None
    with pytest.raises(ValueError, match="naive"):
        process(datetime(2026, 12, 7))
