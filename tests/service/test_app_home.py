"""The App home: the getting-started checklist ticked from the App's real rows, the API
examples with its real ids (never a token), the runs that failed in the last day, and the
cost of today and of the month to date, for the App's owner only."""

from __future__ import annotations

import shlex
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlmodel import Session

from mosoo_core import agents, app_home, identity, sessions, usage, vault
from mosoo_core.errors import NotFound
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.usage import UsageDaily, UsageEvent, UsageRollupDay

PROVIDER_KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"
NOW = datetime(2026, 11, 20, 15, 30, tzinfo=UTC)
URL = "http://127.0.0.1:3000"


def _owner(db: Session, email: str = "owner@example.com") -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _ready_agent(db: Session, account_id: str, app_id: str, name: str = "Helper") -> str:
    credential = vault.create_provider_credential(
        db,
        account_id,
        app_id,
        vault.ProviderCredentialInput(
            name=f"P {name}",
            provider="openai_compatible",
            base_url="http://10.0.0.5:8000/v1",
            api_key=PROVIDER_KEY,
            models=["model-a"],
        ),
    )
    agent = agents.create_agent(db, account_id, app_id, name=name)
    agents.update_agent(
        db,
        account_id,
        app_id,
        agent.id,
        agents.AgentChanges(provider_credential_id=credential.id, model="model-a"),
    )
    return agent.id


def _done(db: Session, account_id: str, app_id: str) -> dict[str, bool]:
    return {step.key: step.done for step in app_home.checklist(db, account_id, app_id)}


def test_a_new_app_has_nothing_ticked_and_examples_name_a_placeholder_agent(db: Session) -> None:
    account_id, app_id = _owner(db)

    assert _done(db, account_id, app_id) == dict.fromkeys(app_home.STEPS, False)
    home = app_home.app_home(db, account_id, app_id, public_url=URL + "/", now=NOW)
    assert home.getting_started and not home.working
    assert home.agents == [] and home.recent_threads == [] and home.failed_runs == []
    assert home.cost_today == home.cost_month == usage.CostTotal()
    assert home.example.agent_id is None
    assert f"{URL}/api/v1/agents/$AGENT_ID/threads" in home.example.curl
    assert '"Authorization: Bearer $MOSOO_TOKEN"' in home.example.curl


def test_provider_agent_and_preview_message_tick_their_steps_then_publish_and_api(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    agent_id = _ready_agent(db, account_id, app_id)
    assert _done(db, account_id, app_id) == {
        "provider": True,
        "agent": True,
        "preview": False,
        "publish": False,
        "api": False,
    }

    # An empty Preview thread is not a chat yet; its first message is.
    thread = sessions.create_session(db, account_id, app_id, agent_id, purpose="preview")
    assert not _done(db, account_id, app_id)["preview"]
    sessions.send_message(db, account_id, thread.id, "Hi there")
    assert _done(db, account_id, app_id) == {
        "provider": True,
        "agent": True,
        "preview": True,
        "publish": False,
        "api": False,
    }

    agents.publish_agent(db, account_id, app_id, agent_id)
    sessions.create_session(db, account_id, app_id, agent_id, purpose="api")
    assert all(_done(db, account_id, app_id).values())
    home = app_home.app_home(db, account_id, app_id, public_url=URL, now=NOW)
    assert not home.getting_started and home.working
    assert [(a.name, a.status, a.published_version, a.ready) for a in home.agents] == [
        ("Helper", "published", 1, True)
    ]
    assert {t.id for t in home.recent_threads} >= {thread.id}


def test_examples_call_the_first_published_agent_with_the_token_as_a_variable(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    draft_id = _ready_agent(db, account_id, app_id, "Draft one")
    example = app_home.api_example(db, account_id, app_id, public_url=URL)
    assert example.agent_id == draft_id and not example.agent_published

    published_id = _ready_agent(db, account_id, app_id, "Live one")
    agents.publish_agent(db, account_id, app_id, published_id)
    example = app_home.api_example(db, account_id, app_id, public_url=URL)
    assert example.agent_id == published_id and example.agent_published
    # The curl line is one shell command whose words are the request.
    words = shlex.split(example.curl.replace("\\\n", " "))
    assert words[:3] == ["curl", "-X", "POST"]
    assert words[3] == f"{URL}/api/v1/agents/{published_id}/threads"
    assert "Authorization: Bearer $MOSOO_TOKEN" in words
    assert example.cli.splitlines() == [
        f"export MOSOO_URL={URL}",
        f'mosoo run {published_id} "Hello"',
    ]
    assert PROVIDER_KEY not in example.curl + example.cli


def test_runs_that_failed_in_the_last_day_are_listed_newest_first(db: Session) -> None:
    account_id, app_id = _owner(db)
    agent_id = _ready_agent(db, account_id, app_id)
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    for hours_ago, status, code in (
        (30, "failed", "too_old"),
        (5, "failed", "driver_lost"),
        (2, "completed", None),
        (1, "failed", "setup_failed"),
    ):
        when = NOW - timedelta(hours=hours_ago)
        db.add(
            SessionRun(
                session_id=thread.id,
                app_id=app_id,
                status=status,
                error_code=code,
                error_message=f"{code} happened" if code else None,
                created_at=when - timedelta(minutes=1),
                finished_at=when,
            )
        )
    db.flush()

    home = app_home.app_home(db, account_id, app_id, public_url=URL, now=NOW)
    assert [r.error_code for r in home.failed_runs] == ["setup_failed", "driver_lost"]
    assert home.failed_runs_total == 2
    assert home.failed_runs[0].agent_name == "Helper"
    assert home.failed_runs[0].thread_id == thread.id


def _event(app_id: str, when: datetime, cost: int, *, unpriced: bool = False) -> UsageEvent:
    return UsageEvent(
        app_id=app_id,
        provider="openai",
        model="gpt-x",
        cost_usd_micros=cost,
        unpriced=unpriced,
        created_at=when,
    )


def test_cost_today_and_this_month_sum_the_apps_usage_records(db: Session) -> None:
    account_id, app_id = _owner(db)
    _other_account, other_app = _owner(db, "other@example.com")
    today = NOW.date()
    db.add_all(
        [
            _event(app_id, NOW.replace(hour=0, minute=0), 1_250_000),
            _event(app_id, NOW - timedelta(minutes=5), 3, unpriced=True),
            _event(app_id, NOW - timedelta(days=1), 20_000_000),  # this month, not today
            _event(app_id, datetime(2026, 10, 31, 23, 59, tzinfo=UTC), 7_000_000),  # last month
            _event(other_app, NOW, 99_000_000),  # another owner's App
        ]
    )
    # A day of this month whose raw records were pruned counts from its rollup (once).
    pruned_day = date(2026, 11, 2)
    db.add(UsageRollupDay(day=pruned_day, computed_at=NOW, complete=True, raw_pruned=True))
    db.add(
        UsageDaily(
            day=pruned_day,
            app_id=app_id,
            provider="openai",
            model="gpt-x",
            purpose="api",
            calls=4,
            cost_usd_micros=400_000,
        )
    )
    db.add(_event(app_id, datetime(2026, 11, 2, 8, tzinfo=UTC), 400_000))  # a straggler
    db.flush()

    home = app_home.app_home(db, account_id, app_id, public_url=URL, now=NOW)
    assert home.cost_today == usage.CostTotal(cost_usd_micros=1_250_003, calls=2, unpriced_calls=1)
    assert home.cost_month == usage.CostTotal(
        cost_usd_micros=1_250_003 + 20_000_000 + 400_000, calls=7, unpriced_calls=1
    )
    assert usage.app_cost(db, app_id, start=today, end=today) == home.cost_today


def test_another_owners_app_is_not_found(db: Session) -> None:
    _account_id, app_id = _owner(db)
    stranger, _own_app = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        app_home.app_home(db, stranger, app_id, public_url=URL)
    with pytest.raises(NotFound):
        app_home.checklist(db, stranger, app_id)
    with pytest.raises(NotFound):
        app_home.api_example(db, stranger, app_id, public_url=URL)
