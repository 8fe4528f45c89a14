"""The typed Agent changes: provider options merged and range-checked in one service call
(each refusal naming its option, nothing stored), `AgentChanges` telling "left out" (UNSET)
from "clear" (None), and the App-scoped thread lookup the Threads page uses."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from sqlmodel import Session

from mosoo_core import agents, identity, sessions, vault
from mosoo_core.errors import InvalidInput, NotFound

PROVIDER_KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"
ENVIRONMENT = "01ENVPYTHON000000000000000"
SKILL = "01SKILLCHANGELOG0000000000"


def _owner(db: Session, email: str = "changes@example.com") -> tuple[str, str, str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    credential = vault.create_provider_credential(
        db,
        account.id,
        app_id,
        vault.ProviderCredentialInput(
            name="Team key",
            provider="openai_compatible",
            base_url="http://10.0.0.5:8000/v1",
            api_key=PROVIDER_KEY,
            models=["model-a"],
        ),
    )
    agent = agents.create_agent(db, account.id, app_id, name="Helper")
    return account.id, app_id, agent.id, credential.id


def _options(
    db: Session, account_id: str, app_id: str, agent_id: str, **changes: Any
) -> agents.AgentView:
    return agents.update_provider_options(
        db, account_id, app_id, agent_id, agents.ProviderOptionChanges(**changes)
    )


# --- provider options: merged and range-checked ---------------------------------------------


def test_one_option_is_merged_into_the_others_and_none_removes_it(db: Session) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    agents.update_agent(
        db,
        account_id,
        app_id,
        agent_id,
        agents.AgentChanges(provider_options={"seed": 7, "max_tokens": 4096}),
    )

    saved = _options(db, account_id, app_id, agent_id, temperature=0.7)
    assert saved.provider_options == {"seed": 7, "max_tokens": 4096, "temperature": 0.7}

    saved = _options(db, account_id, app_id, agent_id, max_tokens=None, reasoning_effort="high")
    assert saved.provider_options == {"seed": 7, "temperature": 0.7, "reasoning_effort": "high"}
    assert (
        agents.get_agent(db, account_id, app_id, agent_id).provider_options
        == saved.provider_options
    )


def test_the_edges_of_each_range_are_allowed(db: Session) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    for temperature, max_tokens in ((0, 1), (2, agents.MAX_TOKENS_LIMIT), (1.25, 512)):
        saved = _options(
            db, account_id, app_id, agent_id, temperature=temperature, max_tokens=max_tokens
        )
        assert saved.provider_options == {"temperature": temperature, "max_tokens": max_tokens}
    for effort in agents.REASONING_EFFORTS:
        assert (
            _options(db, account_id, app_id, agent_id, reasoning_effort=effort).provider_options[
                "reasoning_effort"
            ]
            == effort
        )


BAD_OPTIONS: list[tuple[str, Any]] = [
    ("temperature", 2.01),
    ("temperature", -0.1),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", "0.5"),
    ("temperature", True),
    ("max_tokens", 0),
    ("max_tokens", agents.MAX_TOKENS_LIMIT + 1),
    ("max_tokens", 1.5),
    ("max_tokens", "100"),
    ("max_tokens", True),
    ("reasoning_effort", "extreme"),
    ("reasoning_effort", ""),
    ("reasoning_effort", 1),
]


@pytest.mark.parametrize(
    ("key", "value"), BAD_OPTIONS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD_OPTIONS)]
)
def test_an_option_out_of_range_is_refused_with_its_name_and_nothing_changes(
    db: Session, key: str, value: Any
) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    _options(
        db, account_id, app_id, agent_id, temperature=0.3, max_tokens=100, reasoning_effort="low"
    )
    db.commit()
    before = agents.get_agent(db, account_id, app_id, agent_id)

    with pytest.raises(InvalidInput) as refused:
        _options(db, account_id, app_id, agent_id, **{key: value})

    assert refused.value.field == key
    assert refused.value.message == agents.PROVIDER_OPTION_RULES[key]
    db.rollback()
    db.expunge_all()
    after = agents.get_agent(db, account_id, app_id, agent_id)
    assert after.provider_options == {
        "temperature": 0.3,
        "max_tokens": 100,
        "reasoning_effort": "low",
    }
    assert after.updated_at == before.updated_at


def test_a_refused_option_in_a_batch_keeps_the_good_ones_out_too(db: Session) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    with pytest.raises(InvalidInput) as refused:
        _options(db, account_id, app_id, agent_id, temperature=0.5, max_tokens=0)
    assert refused.value.field == "max_tokens"
    assert agents.get_agent(db, account_id, app_id, agent_id).provider_options == {}


def test_options_of_another_apps_agent_are_not_found(db: Session) -> None:
    _, _, agent_id, _ = _owner(db)
    stranger_id, stranger_app, _, _ = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        _options(db, stranger_id, stranger_app, agent_id, temperature=1)


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("temperature", " 0.7 ", agents.ProviderOptionChanges(temperature=0.7)),
        ("temperature", "", agents.ProviderOptionChanges(temperature=None)),
        ("max_tokens", "4096", agents.ProviderOptionChanges(max_tokens=4096)),
        ("max_tokens", "  ", agents.ProviderOptionChanges(max_tokens=None)),
        ("reasoning_effort", "low", agents.ProviderOptionChanges(reasoning_effort="low")),
    ],
)
def test_option_text_parses_to_one_change_and_empty_means_the_providers_default(
    key: str, text: str, expected: agents.ProviderOptionChanges
) -> None:
    assert agents.parse_provider_option(key, text) == expected
    assert list(agents.parse_provider_option(key, text).set_fields()) == [key]


@pytest.mark.parametrize(
    ("key", "text"), [("temperature", "warm"), ("max_tokens", "1.5"), ("max_tokens", "lots")]
)
def test_option_text_that_is_not_a_number_is_refused_with_the_options_message(
    key: str, text: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        agents.parse_provider_option(key, text)
    assert refused.value.field == key
    assert refused.value.message == agents.PROVIDER_OPTION_RULES[key]


def test_parsed_text_out_of_range_is_refused_by_the_update(db: Session) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    with pytest.raises(InvalidInput) as refused:
        agents.update_provider_options(
            db, account_id, app_id, agent_id, agents.parse_provider_option("temperature", "3")
        )
    assert refused.value.field == "temperature"
    assert agents.get_agent(db, account_id, app_id, agent_id).provider_options == {}


# --- AgentChanges: UNSET keeps, None clears ------------------------------------------------


def test_agent_changes_give_only_the_fields_set_and_are_frozen() -> None:
    changes = agents.AgentChanges(model="m", provider_credential_id=None)
    assert changes.set_fields() == {"model": "m", "provider_credential_id": None}
    assert changes.name is agents.UNSET
    assert agents.AgentChanges().set_fields() == {}
    with pytest.raises(FrozenInstanceError):
        changes.model = "other"  # type: ignore[misc]


def test_fields_left_unset_keep_their_values_and_none_clears(db: Session) -> None:
    account_id, app_id, agent_id, credential_id = _owner(db)
    full = agents.update_agent(
        db,
        account_id,
        app_id,
        agent_id,
        agents.AgentChanges(
            provider_credential_id=credential_id,
            model="model-a",
            description="Helps.",
            provider_options={"temperature": 0.2},
            environment_id=ENVIRONMENT,
            skills=[SKILL],
        ),
    )

    untouched = agents.update_agent(
        db, account_id, app_id, agent_id, agents.AgentChanges(name="Renamed")
    )
    for name in (
        "provider_credential_id",
        "model",
        "description",
        "provider_options",
        "environment_id",
        "skills",
    ):
        assert getattr(untouched, name) == getattr(full, name), name
    assert untouched.name == "Renamed"

    cleared = agents.update_agent(
        db,
        account_id,
        app_id,
        agent_id,
        agents.AgentChanges(
            provider_credential_id=None, provider_options=None, environment_id=None, skills=None
        ),
    )
    assert cleared.provider_credential_id is None
    assert cleared.provider_options == {}
    assert cleared.environment_id is None
    assert cleared.skills == []
    assert cleared.model == "model-a" and cleared.description == "Helps."


def test_a_refused_change_names_its_field_and_stores_none_of_the_others(db: Session) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    with pytest.raises(InvalidInput) as refused:
        agents.update_agent(
            db,
            account_id,
            app_id,
            agent_id,
            agents.AgentChanges(description="Fine.", model="m" * 201),
        )
    assert refused.value.field == "model"
    kept = agents.get_agent(db, account_id, app_id, agent_id)
    assert kept.description == "" and kept.model == ""


# --- the App-scoped thread lookup ----------------------------------------------------------


def test_a_thread_is_found_in_its_own_app_and_not_found_in_another(db: Session) -> None:
    account_id, app_id, agent_id, _ = _owner(db)
    thread_id = sessions.create_session(db, account_id, app_id, agent_id).id
    other_app = identity.create_app(db, account_id, name="Second App").id

    assert sessions.get_thread(db, account_id, thread_id, app_id=app_id).id == thread_id
    assert sessions.get_thread(db, account_id, thread_id).app_id == app_id
    with pytest.raises(NotFound):
        sessions.get_thread(db, account_id, thread_id, app_id=other_app)
    stranger_id, stranger_app, _, _ = _owner(db, "stranger@example.com")
    with pytest.raises(NotFound):
        sessions.get_thread(db, stranger_id, thread_id, app_id=stranger_app)
    with pytest.raises(NotFound):
        sessions.get_thread(db, stranger_id, thread_id, app_id=app_id)
