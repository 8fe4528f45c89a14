"""GET /api/v1/usage answers the daily rollup for the token owner's App; bad parameters are a
400 in the API's error shape; another owner's App is not_found; a run carries its usage."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import usage
from mosoo_core.clock import utcnow
from mosoo_core.tables.usage import UsageDaily
from mosoo_core.usage import PriceInput, UsageNumbers, record_usage, set_app_price
from tests.api.conftest import ApiOwner

DAY = date(2026, 11, 2)
CALL = UsageNumbers(input_tokens=2_000, output_tokens=500)


def _at(day: date, hour: int) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def _usage(engine: Engine, owner: ApiOwner, *, rebuild_at: datetime | None = None) -> None:
    """Two priced calls of the owner's agent on DAY, one unpriced the day after, rolled up."""
    with Session(engine) as db:
        set_app_price(
            db,
            owner.account_id,
            owner.app_id,
            PriceInput("openai_compatible", "test-model", "1.50", "3"),
            now=_at(DAY, 0),
        )
        for hour in (9, 10):
            record_usage(
                db,
                app_id=owner.app_id,
                provider="openai_compatible",
                model="test-model",
                numbers=CALL,
                agent_id=owner.agent_id,
                purpose="api",
                at=_at(DAY, hour),
            )
        record_usage(
            db,
            app_id=owner.app_id,
            provider="openai_compatible",
            model="homebrew",
            numbers=CALL,
            agent_id=owner.agent_id,
            purpose="preview",
            at=_at(DAY + timedelta(days=1), 9),
        )
        usage.rebuild(db, now=rebuild_at or _at(DAY + timedelta(days=3), 0))
        db.commit()


def _get(client: TestClient, owner: ApiOwner, **params: str) -> dict[str, Any]:
    response = client.get("/api/v1/usage", headers=owner.headers, params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_usage_by_model_has_totals_costs_and_names_the_unpriced_models(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    _usage(api_env, owner)
    body = _get(
        client,
        owner,
        app_id=owner.app_id,
        **{"from": str(DAY), "to": str(DAY + timedelta(days=1))},
        group_by="model",
    )
    assert (body["app_id"], body["from"], body["to"], body["group_by"]) == (
        owner.app_id,
        str(DAY),
        str(DAY + timedelta(days=1)),
        "model",
    )
    # 2_000 * $1.50 + 500 * $3 per million = 3_000 + 1_500 micros a call.
    priced, unpriced = body["groups"]
    assert (priced["model"], priced["calls"], priced["cost_usd_micros"]) == ("test-model", 2, 9_000)
    assert priced["cost_usd"] == "0.009000"
    assert (unpriced["model"], unpriced["cost_usd_micros"], unpriced["unpriced_calls"]) == (
        "homebrew",
        0,
        1,
    )
    assert body["total"]["calls"] == 3 and body["total"]["input_tokens"] == 6_000
    assert body["total"]["cost_usd_micros"] == 9_000
    assert body["unpriced_models"] == [
        {"provider": "openai_compatible", "model": "homebrew", "calls": 1}
    ]


def test_usage_by_day_agent_and_purpose(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    _usage(api_env, owner)
    window = {"from": str(DAY), "to": str(DAY + timedelta(days=2))}
    days = _get(client, owner, **window, group_by="day")["groups"]
    assert [(g["day"], g["calls"]) for g in days] == [
        (str(DAY), 2),
        (str(DAY + timedelta(days=1)), 1),
        (str(DAY + timedelta(days=2)), 0),
    ]
    agents = _get(client, owner, **window, group_by="agent")["groups"]
    assert [(g["agent_id"], g["agent_name"], g["calls"]) for g in agents] == [
        (owner.agent_id, "Agent of owner@example.com", 3)
    ]
    purposes = _get(client, owner, **window, group_by="purpose")["groups"]
    assert {g["purpose"]: g["calls"] for g in purposes} == {"api": 2, "preview": 1}


def test_usage_defaults_to_the_last_30_days_by_day_of_the_first_app(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    today = utcnow().date()
    _usage(api_env, owner)
    body = _get(client, owner)
    assert body["group_by"] == "day" and body["app_id"] == owner.app_id
    assert body["to"] == str(today) and body["from"] == str(today - timedelta(days=29))
    assert len(body["groups"]) == 30


def test_another_owners_app_is_not_found_and_shows_nothing(
    client: TestClient, owner: ApiOwner, other: ApiOwner, api_env: Engine
) -> None:
    _usage(api_env, other)
    response = client.get(
        "/api/v1/usage",
        headers=owner.headers,
        params={"app_id": other.app_id, "from": str(DAY), "to": str(DAY)},
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    mine = _get(client, owner, **{"from": str(DAY), "to": str(DAY)})
    assert mine["total"]["calls"] == 0


def test_bad_parameters_are_a_400_naming_the_field(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    cases = [
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-02-30"}, "to"),
        ({"group_by": "week"}, "group_by"),
        ({"from": "2026-11-02", "to": "2026-11-01"}, "from"),
        ({"from": "2025-01-01", "to": "2026-02-05"}, "to"),  # 401 days
    ]
    for params, field in cases:
        response = client.get("/api/v1/usage", headers=owner.headers, params=params)
        assert response.status_code == 400, (params, response.text)
        error = response.json()["error"]
        assert (error["code"], error.get("field")) == ("invalid_request", field), params
        assert error["message"]
    with Session(api_env) as db:  # a refused question leaves no trace
        assert db.exec(select(UsageDaily)).all() == []


def test_usage_needs_a_token(client: TestClient, owner: ApiOwner) -> None:
    response = client.get("/api/v1/usage")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_a_run_carries_the_tokens_and_cost_of_its_calls(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    started = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "Hello there"},
    )
    assert started.status_code == 201, started.text
    run = started.json()["run"]
    assert run["usage"]["calls"] == 0 and run["usage"]["cost_usd_micros"] == 0
    with Session(api_env) as db:
        set_app_price(
            db,
            owner.account_id,
            owner.app_id,
            PriceInput("openai_compatible", "test-model", "1.50", "3"),
        )
        for _ in range(2):
            record_usage(
                db,
                app_id=owner.app_id,
                provider="openai_compatible",
                model="test-model",
                numbers=CALL,
                agent_id=owner.agent_id,
                run_id=run["id"],
                purpose="api",
            )
        db.commit()
    thread = client.get(f"/api/v1/threads/{run['thread_id']}", headers=owner.headers).json()
    assert thread["latest_run"]["usage"] == {
        "calls": 2,
        "input_tokens": 4_000,
        "cached_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "output_tokens": 1_000,
        "reasoning_tokens": 0,
        "cost_usd_micros": 9_000,
        "unpriced_calls": 0,
    }


def test_the_usage_operation_is_documented(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    operation = document["paths"]["/usage"]["get"]
    assert operation["operationId"] == "getUsage" and operation["tags"] == ["Usage"]
    assert {p["name"] for p in operation["parameters"]} == {"app_id", "from", "to", "group_by"}
    assert "400 days" in operation["responses"]["400"]["description"]
    group_by = next(p for p in operation["parameters"] if p["name"] == "group_by")
    assert group_by["schema"]["enum"] == ["day", "agent", "model", "purpose"]
    assert "usage" in document["components"]["schemas"]["Run"]["properties"]
