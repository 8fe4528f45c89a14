"""`/api/usage/export.csv`: the console's usage CSV download (session cookie)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import identity, usage
from mosoo_core.settings import get_settings
from mosoo_core.usage import PriceInput, UsageNumbers, record_usage, set_app_price
from mosoo_web.api import build_api

RANGE = "from=2026-11-01&to=2026-11-30"


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(build_api(), base_url="http://127.0.0.1") as client:
        yield client


def _owner(engine: Engine, email: str) -> tuple[str, str]:
    """(session token, App id) of a signed-in owner whose App made three priced calls in
    November 2026 and one in December, rolled up."""
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        since = datetime(2026, 1, 1, tzinfo=UTC)
        set_app_price(
            db,
            account.id,
            app_id,
            PriceInput("openai", "gpt-4o-mini", "1", "2", effective_from=since),
            now=since,
        )
        calls = [datetime(2026, 11, 1, 9), datetime(2026, 11, 2, 9), datetime(2026, 11, 2, 10)]
        for when in [*calls, datetime(2026, 12, 1, 9)]:
            record_usage(
                db,
                app_id=app_id,
                provider="openai",
                model="gpt-4o-mini",
                numbers=UsageNumbers(input_tokens=1_000_000, output_tokens=500_000),
                at=when.replace(tzinfo=UTC),
            )
        usage.rebuild(db, now=datetime(2026, 12, 2, tzinfo=UTC))
        token = identity.start_session(db, account.id, method="email").token
        db.commit()
    return token, app_id


def _get(client: TestClient, token: str | None, query: str) -> httpx.Response:
    client.cookies.clear()
    if token:
        client.cookies.set(get_settings().session_cookie, token)
    return client.get(f"/api/usage/export.csv?{query}")


def _rows(response: httpx.Response) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(response.text, newline="")))


def test_owner_downloads_the_raw_records_of_the_range_as_an_attachment(
    client: TestClient, engine: Engine
) -> None:
    token, app_id = _owner(engine, "csv@example.com")
    response = _get(client, token, f"app_id={app_id}&{RANGE}&kind=raw")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"].startswith(
        'attachment; filename="usage-raw-2026-11-01-to-2026-11-30.csv"'
    )
    assert response.headers["x-content-type-options"] == "nosniff"
    rows = _rows(response)
    # $1 + $1 per call (1M input at $1, 0.5M output at $2), December's call left out.
    assert len(rows) == 3 and {r["app_id"] for r in rows} == {app_id}
    assert [r["cost_usd"] for r in rows] == ["2.000000"] * 3
    assert sum(int(r["cost_usd_micros"]) for r in rows) == 6_000_000


def test_owner_downloads_the_rollup_of_the_range(client: TestClient, engine: Engine) -> None:
    token, app_id = _owner(engine, "rollup-csv@example.com")
    response = _get(client, token, f"app_id={app_id}&{RANGE}&kind=rollup")
    assert response.status_code == 200, response.text
    rows = _rows(response)
    assert [
        (r["day"], r["calls"], r["cost_usd"]) for r in sorted(rows, key=lambda r: r["day"])
    ] == [
        ("2026-11-01", "1", "2.000000"),
        ("2026-11-02", "2", "4.000000"),
    ]


def test_without_a_session_it_is_401(client: TestClient, engine: Engine) -> None:
    _, app_id = _owner(engine, "anon@example.com")
    response = _get(client, None, f"app_id={app_id}&{RANGE}")
    assert response.status_code == 401
    assert _get(client, "not-a-session", f"app_id={app_id}&{RANGE}").status_code == 401


def test_another_owners_app_is_not_found(client: TestClient, engine: Engine) -> None:
    token, _ = _owner(engine, "mine@example.com")
    _, theirs = _owner(engine, "theirs@example.com")
    response = _get(client, token, f"app_id={theirs}&{RANGE}")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert _get(client, token, f"app_id={'x' * 300}&{RANGE}").status_code == 404
    assert _get(client, token, RANGE).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        "from=2026-11-30&to=2026-11-01",
        "from=2025-01-01&to=2026-11-30",
        "from=yesterday&to=2026-11-30",
        "to=2026-11-30",
        f"{RANGE}&kind=everything",
    ],
)
def test_a_bad_range_or_kind_is_400(client: TestClient, engine: Engine, query: str) -> None:
    token, app_id = _owner(engine, "range@example.com")
    response = _get(client, token, f"app_id={app_id}&{query}")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
