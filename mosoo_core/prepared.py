"""Reads that API clients poll, run by the database driver directly.

SQLAlchemy spends 30-50 µs of CPU around each statement it executes (an execution context,
a cursor result, its rows; `bench/api.py` profile), several times what SQLite takes to
answer a lookup by key. An authenticated `GET /threads/{id}` runs three such reads, and one
`mosoo web` serves it at about a thousand requests a second, so they were a tenth of its CPU.
A `PreparedRead` is compiled by SQLAlchemy once per dialect, the caller's parameters go
through SQLAlchemy's own `construct_params` and bind processors, the columns through its own
result processors, and the driver's errors come out as SQLAlchemy's classes: the same
values and errors as `db.execute(statement, params)`, on the caller's connection and in its
transaction. Only for plain selects whose rows the caller reads by column name."""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from mosoo_core.db import Connectable


@dataclass
class _Compiled:
    compiled: SQLCompiler
    positions: tuple[str, ...] | None  # bind names in the driver's order; None: named style
    binds: dict[str, Callable[[Any], Any]]
    row: type[tuple[Any, ...]]
    sequence: Callable[[list[Any]], Any]  # the dialect's form of positional parameters
    error: type[Exception]  # the driver's base error class
    # The columns' processors, made at the first execution from what the driver says each
    # column is (as SQLAlchemy's own results do).
    results: tuple[Callable[[Any], Any] | None, ...] | None = None


class PreparedRead:
    """`statement`, a select built once at import, run with `first` or `one`."""

    def __init__(self, statement: sa.Select[Any]) -> None:
        self.statement = statement
        self._by_dialect: dict[tuple[str, str, str], _Compiled] = {}

    def first(self, db: Connectable, params: dict[str, Any]) -> Any | None:
        """The first row (a named tuple of the selected columns' names), or None."""
        return self._run(db, params)

    def one(self, db: Connectable, params: dict[str, Any]) -> Any:
        row = self._run(db, params)
        if row is None:
            raise sa.exc.NoResultFound("No row was found when one was required")
        return row

    def _run(self, db: Connectable, params: dict[str, Any]) -> Any | None:
        connection = db if isinstance(db, sa.Connection) else db.connection()
        dialect = connection.dialect
        prepared = self._compiled(dialect)
        compiled = prepared.compiled
        values = compiled.construct_params(params, escape_names=False)
        for name, process in prepared.binds.items():
            values[name] = process(values[name])
        arguments: Any
        if prepared.positions is not None:
            arguments = prepared.sequence([values[name] for name in prepared.positions])
        else:
            escaped = compiled.escaped_bind_names
            arguments = {escaped.get(k, k): v for k, v in values.items()} if escaped else values
        driver = connection.connection.driver_connection
        assert driver is not None
        cursor = driver.cursor()
        try:
            cursor.execute(compiled.string, arguments)
            found = cursor.fetchone()
            if prepared.results is None:
                prepared.results = tuple(
                    column.type._cached_result_processor(dialect, described[1])
                    for column, described in zip(
                        compiled._result_columns, cursor.description, strict=True
                    )
                )
        except prepared.error as error:
            raise sa.exc.DBAPIError.instance(
                compiled.string, arguments, error, prepared.error, dialect=dialect
            ) from error
        finally:
            cursor.close()
        if found is None:
            return None
        return prepared.row(
            *(
                value if process is None else process(value)
                for value, process in zip(found, prepared.results, strict=True)
            )
        )

    def _compiled(self, dialect: Dialect) -> _Compiled:
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        found = self._by_dialect.get(key)
        if found is None:
            compiled = self.statement.compile(dialect=dialect)
            # What the driver could not take as it is: SQLAlchemy rewrites such statements at
            # each execution, which is its own work, not this.
            assert not (compiled.literal_execute_params or compiled.post_compile_params)
            # Named as SQLAlchemy's rows name them; a name a tuple cannot take becomes `_n`.
            names = [str(column.keyname) for column in compiled._result_columns]
            row = collections.namedtuple("Row", names, rename=True)  # type: ignore[misc]
            found = _Compiled(
                compiled=compiled,
                positions=tuple(compiled.positiontup or ()) if compiled.positional else None,
                binds={
                    name: process
                    for name, process in compiled._bind_processors.items()
                    if callable(process)
                },
                row=row,
                sequence=dialect.execute_sequence_format,
                error=dialect.loaded_dbapi.Error,
            )
            self._by_dialect[key] = found
        return found
