"""CSV export of usage: 100,000 raw records stream with bounded memory and parse back to the
same totals; the rollup export equals the summary; scoped to the owner's App and range."""

from __future__ import annotations

import csv
import io
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity, usage
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.ids import new_id
from mosoo_core.tables.usage import UsageEvent
from mosoo_core.usage import PriceInput, UsageNumbers, record_usage, set_app_price

D1 = date(2026, 11, 1)
RECORDS = 100_000


def _owner(engine: Engine, email: str) -> tuple[str, str]:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        account_id, app_id = account.id, identity.list_apps(db, account.id)[0].id
        db.commit()
    return account_id, app_id


def _sessions(engine: Engine):  # type: ignore[no-untyped-def]
    return lambda: Session(engine)


def _bulk_records(engine: Engine, app_id: str, count: int) -> dict[str, int]:
    """`count` records over 10 days, two models (one unpriced); returns their sums."""
    sums = {"calls": 0, "input": 0, "cached": 0, "output": 0, "reasoning": 0, "cost": 0}
    batch: list[dict[str, object]] = []
    start = datetime(D1.year, D1.month, D1.day, tzinfo=UTC)
    # One ULID's time and randomness, then a counter: unique, in insertion order, and about a
    # second cheaper than a fresh ULID per record.
    id_prefix = new_id()[:16]
    with engine.begin() as connection:
        for n in range(count):
            priced = n % 3 != 0
            row = {
                "id": f"{id_prefix}{n:010d}",
                "app_id": app_id,
                "agent_id": None if n % 7 == 0 else "A" * 26,
                "session_id": "S" * 26,
                "run_id": "R" * 26,
                "purpose": ("preview", "console", "api", "channel")[n % 4],
                "provider": "openai" if priced else "ollama",
                "model": "gpt-4o-mini" if priced else 'local,"quoted" model',
                "runtime": "openai",
                "input_tokens": 1_000 + n % 50,
                "cached_input_tokens": n % 400,
                "cache_creation_input_tokens": 0,
                "output_tokens": 100 + n % 30,
                "reasoning_tokens": n % 5,
                "cost_usd_micros": 123 + n % 1_000 if priced else 0,
                "unpriced": not priced,
                "created_at": start + timedelta(seconds=n * 8),  # 100k * 8 s: about 9.3 days
            }
            batch.append(row)
            sums["calls"] += 1
            sums["input"] += int(row["input_tokens"])  # type: ignore[call-overload]
            sums["cached"] += int(row["cached_input_tokens"])  # type: ignore[call-overload]
            sums["output"] += int(row["output_tokens"])  # type: ignore[call-overload]
            sums["reasoning"] += int(row["reasoning_tokens"])  # type: ignore[call-overload]
            sums["cost"] += int(row["cost_usd_micros"])  # type: ignore[call-overload]
            if len(batch) == 5_000:
                connection.execute(sa.insert(UsageEvent), batch)
                batch = []
        if batch:
            connection.execute(sa.insert(UsageEvent), batch)
        if connection.dialect.name == "postgresql":
            # What autovacuum does after such a load in an installation. Without statistics
            # PostgreSQL sorted the whole range for each page of the export (10 s here).
            connection.exec_driver_sql("ANALYZE usage_event")
    return sums


def _parse(text: Iterator[str] | str) -> list[dict[str, str]]:
    body = text if isinstance(text, str) else "".join(text)
    return list(csv.DictReader(io.StringIO(body, newline="")))


def test_100k_raw_records_stream_with_bounded_memory_and_parse_to_the_same_totals(
    engine: Engine, tmp_path: Path
) -> None:
    account_id, app_id = _owner(engine, "big@example.com")
    expected = _bulk_records(engine, app_id, RECORDS)
    export = usage.usage_csv(
        _sessions(engine), account_id, app_id, start=D1, end=D1 + timedelta(days=10), kind="raw"
    )
    out = tmp_path / "raw.csv"
    written = chunks = largest = 0
    started = time.perf_counter()
    tracemalloc.start()
    try:
        with out.open("w", encoding="utf-8", newline="") as sink:
            for chunk in export.chunks:
                sink.write(chunk)
                written += len(chunk)
                largest = max(largest, len(chunk))
                chunks += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    print(
        f"\nusage raw export: {RECORDS} records, {written / 1e6:.1f} MB of CSV in {chunks} chunks "
        f"(largest {largest / 1e3:.0f} kB), peak traced memory {peak / 1e6:.2f} MB, "
        f"{elapsed:.1f} s"
    )
    assert written > 15_000_000  # the whole CSV: what building it in memory would take
    assert peak < 6_000_000 and peak < written / 4
    rows = _parse(out.read_text(encoding="utf-8"))
    assert len(rows) == RECORDS and len({r["id"] for r in rows}) == RECORDS
    assert sum(int(r["input_tokens"]) for r in rows) == expected["input"]
    assert sum(int(r["cached_input_tokens"]) for r in rows) == expected["cached"]
    assert sum(int(r["output_tokens"]) for r in rows) == expected["output"]
    assert sum(int(r["reasoning_tokens"]) for r in rows) == expected["reasoning"]
    assert sum(int(r["cost_usd_micros"]) for r in rows) == expected["cost"]
    assert sum(Decimal(r["cost_usd"]) for r in rows) == Decimal(expected["cost"]) / 1_000_000
    assert {r["model"] for r in rows} == {"gpt-4o-mini", 'local,"quoted" model'}
    assert sum(r["unpriced"] == "true" for r in rows) == len(range(0, RECORDS, 3))


def test_raw_export_keeps_to_the_range_and_the_app(engine: Engine) -> None:
    account_id, app_id = _owner(engine, "range@example.com")
    _, other_app = _owner(engine, "neighbour@example.com")
    with Session(engine) as db:
        for app, day in ((app_id, D1), (app_id, D1 + timedelta(days=1)), (other_app, D1)):
            record_usage(
                db,
                app_id=app,
                provider="openai",
                model="gpt-4o-mini",
                numbers=UsageNumbers(input_tokens=10, output_tokens=1),
                at=datetime(day.year, day.month, day.day, 23, 59, tzinfo=UTC),
            )
        db.commit()
    export = usage.usage_csv(_sessions(engine), account_id, app_id, start=D1, end=D1, kind="raw")
    rows = _parse(export.chunks)
    assert [r["app_id"] for r in rows] == [app_id]
    assert rows[0]["created_at"].startswith("2026-11-01T23:59")
    assert export.filename == "usage-raw-2026-11-01-to-2026-11-01.csv"


def test_rollup_export_has_the_summary_totals(engine: Engine) -> None:
    account_id, app_id = _owner(engine, "rollup@example.com")
    with Session(engine) as db:
        price = PriceInput(
            "openai", "gpt-4o-mini", "1", "2", effective_from=datetime(2026, 1, 1, tzinfo=UTC)
        )
        set_app_price(db, account_id, app_id, price, now=datetime(2026, 1, 1, tzinfo=UTC))
        for n in range(30):
            record_usage(
                db,
                app_id=app_id,
                provider="openai" if n % 2 else "ollama",
                model="gpt-4o-mini" if n % 2 else "my-llama",
                numbers=UsageNumbers(input_tokens=1_000 + n, output_tokens=100),
                purpose="api" if n % 3 else "preview",
                at=datetime(2026, 11, 1 + n % 5, 10, tzinfo=UTC),
            )
        usage.rebuild(db, now=datetime(2026, 11, 20, tzinfo=UTC))
        db.commit()
        report = usage.summary(
            db, account_id, app_id, start=D1, end=date(2026, 11, 5), group_by="day"
        )
    export = usage.usage_csv(
        _sessions(engine), account_id, app_id, start=D1, end=date(2026, 11, 5), kind="rollup"
    )
    rows = _parse(export.chunks)
    assert len(rows) > 5
    assert sum(int(r["calls"]) for r in rows) == report.total.calls == 30
    assert sum(int(r["input_tokens"]) for r in rows) == report.total.input_tokens
    assert sum(int(r["cost_usd_micros"]) for r in rows) == report.total.cost_usd_micros > 0
    assert sum(int(r["unpriced_calls"]) for r in rows) == report.total.unpriced_calls == 15


def test_small_pages_still_export_every_row_once(engine: Engine) -> None:
    account_id, app_id = _owner(engine, "pages@example.com")
    _bulk_records(engine, app_id, 1_001)
    export = usage.usage_csv(
        _sessions(engine),
        account_id,
        app_id,
        start=D1,
        end=D1 + timedelta(days=1),
        kind="raw",
        page_size=100,
    )
    chunks = list(export.chunks)
    rows = _parse("".join(chunks))
    assert len(rows) == 1_001 == len({r["id"] for r in rows})
    assert len(chunks) == 11  # one per page of 100 (the header rides with the first)


def test_another_owners_app_bad_ranges_and_kinds_are_refused_before_streaming(
    engine: Engine,
) -> None:
    account_id, my_app = _owner(engine, "me@example.com")
    _, other_app = _owner(engine, "them@example.com")
    with pytest.raises(NotFound):
        usage.usage_csv(_sessions(engine), account_id, other_app, start=D1, end=D1, kind="raw")
    with pytest.raises(InvalidInput):
        usage.usage_csv(
            _sessions(engine), account_id, my_app, start=D1, end=D1 - timedelta(1), kind="raw"
        )
    with pytest.raises(InvalidInput):
        usage.usage_csv(
            _sessions(engine), account_id, my_app, start=D1, end=D1 + timedelta(400), kind="raw"
        )
    with pytest.raises(InvalidInput):
        usage.usage_csv(_sessions(engine), account_id, my_app, start=D1, end=D1, kind="everything")
