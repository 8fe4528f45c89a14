"""CSV export of an App's usage over a range of UTC days: its raw records (one row per model
call, while raw retention keeps them) or its daily rollup rows.

Streamed: the rows are read in pages by keyset (`id > last id`, each page in a short session
of its own, so nothing is held open between chunks), and each page is written through
`csv.writer` into a small buffer that is yielded and emptied. Memory stays at about one page
whatever the range holds.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, get_args

from sqlmodel import Session, col, select

from mosoo_core.errors import InvalidInput
from mosoo_core.ownership import owned_app
from mosoo_core.tables.usage import UsageDaily, UsageEvent
from mosoo_core.usage.reports import check_range

ExportKind = Literal["raw", "rollup"]
EXPORT_KINDS: tuple[str, ...] = get_args(ExportKind)
PAGE_SIZE = 1_000

RAW_COLUMNS = (
    "id",
    "created_at",
    "app_id",
    "agent_id",
    "thread_id",
    "run_id",
    "purpose",
    "provider",
    "model",
    "runtime",
    "input_tokens",
    "cached_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_usd_micros",
    "cost_usd",
    "unpriced",
)
ROLLUP_COLUMNS = (
    "day",
    "app_id",
    "agent_id",
    "provider",
    "model",
    "purpose",
    "calls",
    "input_tokens",
    "cached_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_usd_micros",
    "cost_usd",
    "unpriced_calls",
)

_RAW_SELECT = (
    UsageEvent.id,
    UsageEvent.created_at,
    UsageEvent.app_id,
    UsageEvent.agent_id,
    UsageEvent.session_id,
    UsageEvent.run_id,
    UsageEvent.purpose,
    UsageEvent.provider,
    UsageEvent.model,
    UsageEvent.runtime,
    UsageEvent.input_tokens,
    UsageEvent.cached_input_tokens,
    UsageEvent.cache_creation_input_tokens,
    UsageEvent.output_tokens,
    UsageEvent.reasoning_tokens,
    UsageEvent.cost_usd_micros,
    UsageEvent.unpriced,
)
_ROLLUP_SELECT = (
    UsageDaily.id,
    UsageDaily.day,
    UsageDaily.app_id,
    UsageDaily.agent_id,
    UsageDaily.provider,
    UsageDaily.model,
    UsageDaily.purpose,
    UsageDaily.calls,
    UsageDaily.input_tokens,
    UsageDaily.cached_input_tokens,
    UsageDaily.cache_creation_input_tokens,
    UsageDaily.output_tokens,
    UsageDaily.reasoning_tokens,
    UsageDaily.cost_usd_micros,
    UsageDaily.unpriced_calls,
)

OpenSession = Callable[[], AbstractContextManager[Session]]


@dataclass(frozen=True)
class UsageCsv:
    """A checked export: `chunks` yields the CSV text (header first) as it is read."""

    app_id: str
    start: date
    end: date  # inclusive
    kind: str
    filename: str
    chunks: Iterator[str]


def usd_text(micros: int) -> str:
    """Micros as an exact decimal string of USD ("1.234567")."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{fraction:06d}"


# A spreadsheet runs a cell that starts with one of these as a formula. Model names come from
# the provider's answers, so a hostile or broken upstream could plant `=HYPERLINK(...)` in an
# owner's export: such text cells get a leading apostrophe (OWASP's CSV-injection advice).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def text_cell(value: str) -> str:
    """A text cell a spreadsheet shows as text, never runs as a formula."""
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _raw_line(row: Sequence[Any]) -> list[object]:
    (id_, created_at, app_id, agent_id, thread_id, run_id, purpose, provider, model, runtime) = row[
        :10
    ]
    input_, cached, created, output, reasoning, cost, unpriced = row[10:]
    return [
        id_,
        created_at.astimezone(UTC).isoformat(),
        app_id,
        agent_id or "",
        thread_id or "",
        run_id or "",
        purpose,
        text_cell(provider),
        text_cell(model),
        runtime or "",
        input_,
        cached,
        created,
        output,
        reasoning,
        cost,
        usd_text(cost),
        "true" if unpriced else "false",
    ]


def _rollup_line(row: Sequence[Any]) -> list[object]:
    # row[0] is the id, used only to page.
    day, app_id, agent_id, provider, model, purpose = row[1:7]
    calls, input_, cached, created, output, reasoning, cost, unpriced_calls = row[7:]
    return [
        day.isoformat(),
        app_id,
        agent_id or "",
        text_cell(provider),
        text_cell(model),
        purpose,
        calls,
        input_,
        cached,
        created,
        output,
        reasoning,
        cost,
        usd_text(cost),
        unpriced_calls,
    ]


def _page(
    db: Session, kind: str, app_id: str, start: date, end: date, after: str, size: int
) -> list[Any]:
    if kind == "raw":
        return list(
            db.exec(
                select(*_RAW_SELECT)  # type: ignore[call-overload]
                .where(
                    UsageEvent.app_id == app_id,
                    col(UsageEvent.created_at) >= _midnight(start),
                    col(UsageEvent.created_at) < _midnight(end + timedelta(days=1)),
                    col(UsageEvent.id) > after,
                )
                .order_by(col(UsageEvent.id))
                .limit(size)
            ).all()
        )
    return list(
        db.exec(
            select(*_ROLLUP_SELECT)  # type: ignore[call-overload]
            .where(
                UsageDaily.app_id == app_id,
                col(UsageDaily.day) >= start,
                col(UsageDaily.day) <= end,
                col(UsageDaily.id) > after,
            )
            .order_by(col(UsageDaily.id))
            .limit(size)
        ).all()
    )


def _chunks(
    open_session: OpenSession, kind: str, app_id: str, start: date, end: date, page_size: int
) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(RAW_COLUMNS if kind == "raw" else ROLLUP_COLUMNS)
    line = _raw_line if kind == "raw" else _rollup_line
    after = ""
    while True:
        with open_session() as db:
            rows = _page(db, kind, app_id, start, end, after, page_size)
        for row in rows:
            writer.writerow(line(row))
        if buffer.tell():
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
        if len(rows) < page_size:
            return
        after = rows[-1][0]


def usage_csv(
    open_session: OpenSession,
    account_id: str,
    app_id: str,
    *,
    start: date,
    end: date,
    kind: str,
    page_size: int = PAGE_SIZE,
) -> UsageCsv:
    """The App's usage from `start` to `end` (inclusive UTC days, at most 400) as CSV:
    `kind="raw"` one row per model call still kept (raw retention prunes old days), or
    `"rollup"` the daily rollup rows. Every dimension and token bucket, the cost in USD
    micros and as a decimal string. Checked now (another owner's App: NotFound; a bad range
    or kind: InvalidInput); the rows are read as `chunks` is consumed, a page at a time,
    each page in its own session from `open_session`."""
    if kind not in EXPORT_KINDS:
        raise InvalidInput(f"kind must be raw or rollup; not {kind!r}.", field="kind")
    check_range(start, end)
    with open_session() as db:
        owned_app(db, account_id, app_id)
    return UsageCsv(
        app_id=app_id,
        start=start,
        end=end,
        kind=kind,
        filename=f"usage-{kind}-{start.isoformat()}-to-{end.isoformat()}.csv",
        chunks=_chunks(open_session, kind, app_id, start, end, page_size),
    )
