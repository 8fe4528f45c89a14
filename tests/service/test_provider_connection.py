"""Test connection (one real call with the stored key) and deleting a provider Agents still use."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import Session, select
from structlog.testing import capture_logs

from mosoo_core import identity, vault
from mosoo_core.errors import Conflict, NotFound
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.vault import ProviderCredential, VaultSecret
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.processes import free_port

KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"
WRONG_KEY = "sk-proj-Wrong0000000000000000000000000000000000wxyz"


@pytest.fixture
def provider() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=["gpt-4o-mini", "gpt-4o", "o3"], api_key=KEY) as server:
        yield server


def _owner(db: Session, email: str = "owner@example.com") -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _credential(
    db: Session, account_id: str, app_id: str, **overrides: Any
) -> vault.ProviderCredentialView:
    values: dict[str, Any] = {
        "name": "Local",
        "provider": "openai_compatible",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key": KEY,
    }
    values.update(overrides)
    return vault.create_provider_credential(
        db, account_id, app_id, vault.ProviderCredentialInput(**values)
    )


def _agent(db: Session, app_id: str, name: str, credential_id: str | None) -> Agent:
    agent = Agent(app_id=app_id, name=name, provider_credential_id=credential_id)
    db.add(agent)
    db.flush()
    return agent


def _assert_no_key(result: vault.ConnectionResult, *keys: str) -> None:
    shown = repr(result) + str(dataclasses.asdict(result))
    for key in keys:
        assert key not in shown and key[:-4] not in shown


def test_delete_is_refused_while_agents_use_the_credential_and_names_them(db: Session) -> None:
    account_id, app_id = _owner(db)
    used = _credential(db, account_id, app_id)
    spare = _credential(db, account_id, app_id, name="Spare")
    _agent(db, app_id, "Support bot", used.id)
    _agent(db, app_id, "Analyst", used.id)
    _agent(db, app_id, "Unrelated", spare.id)
    secrets_before = len(db.exec(select(VaultSecret)).all())

    with pytest.raises(Conflict) as refused:
        vault.delete_provider_credential(db, account_id, app_id, used.id)

    assert (
        refused.value.message
        == "Used by agent(s): Analyst, Support bot. Choose another key for them first."
    )
    assert vault.get_provider_credential(db, account_id, app_id, used.id).is_default
    assert vault.reveal_provider_key(db, used.id) == KEY
    assert len(db.exec(select(VaultSecret)).all()) == secrets_before


def test_delete_succeeds_once_no_agent_uses_the_credential(db: Session) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id)
    agent = _agent(db, app_id, "Support bot", credential.id)
    agent.provider_credential_id = None
    db.add(agent)
    db.flush()
    vault.delete_provider_credential(db, account_id, app_id, credential.id)
    assert db.get(ProviderCredential, credential.id) is None


def test_another_apps_agents_do_not_block_a_delete(db: Session) -> None:
    account_id, app_id = _owner(db)
    _other_account, other_app = _owner(db, "other@example.com")
    credential = _credential(db, account_id, app_id)
    _agent(
        db, other_app, "Theirs", credential.id
    )  # a stale id in another App says nothing about this one
    vault.delete_provider_credential(db, account_id, app_id, credential.id)
    assert db.get(ProviderCredential, credential.id) is None


def test_connection_ok_lists_the_providers_models_using_the_stored_key(
    db: Session, provider: ScriptedOpenAIServer
) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id, base_url=provider.base_url)

    with capture_logs() as logs:
        result = vault.check_provider_connection(db, account_id, app_id, credential.id)

    assert result.ok, result.message
    assert result.models == ["gpt-4o-mini", "gpt-4o", "o3"]
    assert result.latency_ms >= 0 and "3 model(s)" in result.message
    (request,) = provider.requests
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    _assert_no_key(result, KEY)
    assert [entry["event"] for entry in logs] == ["provider_credential.tested"]
    assert KEY not in repr(logs) and KEY[:-4] not in repr(logs)
    # Only shown: the credential's own (empty) model list is left as it was.
    assert vault.get_provider_credential(db, account_id, app_id, credential.id).models == ()


def test_anthropic_is_tested_with_its_own_key_header_and_version(
    db: Session, provider: ScriptedOpenAIServer
) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(
        db, account_id, app_id, provider="anthropic", base_url=provider.base_url
    )
    result = vault.check_provider_connection(db, account_id, app_id, credential.id)
    assert result.ok, result.message
    (request,) = provider.requests
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers


def test_a_refused_key_is_reported_without_the_key(
    db: Session, provider: ScriptedOpenAIServer
) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id, base_url=provider.base_url, api_key=WRONG_KEY)
    with capture_logs() as logs:
        result = vault.check_provider_connection(db, account_id, app_id, credential.id)
    assert not result.ok
    assert result.message == "The provider refused the key."
    assert result.models == []
    assert provider.requests[0].headers["authorization"] == f"Bearer {WRONG_KEY}"
    _assert_no_key(result, WRONG_KEY, KEY)
    assert WRONG_KEY not in repr(logs)


def test_other_statuses_are_reported_by_their_code(
    db: Session, provider: ScriptedOpenAIServer
) -> None:
    account_id, app_id = _owner(db)
    # A base URL one level off: the server has no /models there.
    credential = _credential(db, account_id, app_id, base_url=provider.origin)
    result = vault.check_provider_connection(db, account_id, app_id, credential.id)
    assert not result.ok
    assert result.message == "The provider answered HTTP 404."


def test_an_unreachable_host_is_reported_by_its_host(db: Session) -> None:
    account_id, app_id = _owner(db)
    port = free_port()  # bound and released: nothing listens there
    credential = _credential(db, account_id, app_id, base_url=f"http://127.0.0.1:{port}/v1")
    result = vault.check_provider_connection(db, account_id, app_id, credential.id)
    assert not result.ok
    assert result.message == f"Could not reach 127.0.0.1:{port}."
    _assert_no_key(result, KEY)


def test_another_owners_credential_is_not_found_and_not_called(
    db: Session, provider: ScriptedOpenAIServer
) -> None:
    account_id, app_id = _owner(db)
    stranger_id, stranger_app = _owner(db, "stranger@example.com")
    credential = _credential(db, account_id, app_id, base_url=provider.base_url)
    with pytest.raises(NotFound):
        vault.check_provider_connection(db, stranger_id, stranger_app, credential.id)
    with pytest.raises(NotFound):
        vault.check_provider_connection(db, stranger_id, app_id, credential.id)
    assert provider.requests == []


def test_a_private_address_is_refused_unless_the_operator_allows_it(
    db: Session, provider: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An owner types the base URL: off (the default), it cannot reach the operator's network.
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id, base_url=provider.base_url)
    monkeypatch.setenv("MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS", "false")
    reset_settings_cache()
    result = vault.check_provider_connection(db, account_id, app_id, credential.id)
    assert not result.ok
    assert result.message == (
        "Refused: 127.0.0.1 is a loopback address; set MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS=true "
        "if your models are served on your own network (Ollama, vLLM)."
    )
    assert provider.requests == []
    _assert_no_key(result, KEY)

    monkeypatch.setenv("MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS", "true")
    reset_settings_cache()
    assert vault.check_provider_connection(db, account_id, app_id, credential.id).ok


def test_the_metadata_address_is_refused_whatever_the_setting(db: Session) -> None:
    account_id, app_id = _owner(db)  # the suite allows private networks: not this one
    credential = _credential(db, account_id, app_id, base_url="http://169.254.169.254/latest")
    result = vault.check_provider_connection(db, account_id, app_id, credential.id)
    assert not result.ok
    assert result.message == "Refused: 169.254.169.254 is the cloud metadata address."


def test_an_anthropic_key_lists_anthropics_own_models_in_one_page(db: Session) -> None:
    """Against the scripted Messages server: `x-api-key` and `anthropic-version` sent, the
    `{"data": [{"id": ...}]}` list read, and a page big enough for all of Anthropic's models
    (its default page is 20)."""
    from tests.support.anthropic_server import ScriptedAnthropicServer

    models = [f"claude-test-{n}" for n in range(25)]
    with ScriptedAnthropicServer(models=models, api_key=KEY) as anthropic:
        account_id, app_id = _owner(db)
        credential = _credential(
            db, account_id, app_id, provider="anthropic", base_url=anthropic.base_url
        )
        result = vault.check_provider_connection(db, account_id, app_id, credential.id)
        wrong = _credential(
            db,
            account_id,
            app_id,
            name="Wrong",
            provider="anthropic",
            base_url=anthropic.base_url,
            api_key=WRONG_KEY,
        )
        refused = vault.check_provider_connection(db, account_id, app_id, wrong.id)
        requests = anthropic.requests
    assert result.ok, result.message
    assert result.models == models
    first = requests[0]
    assert (first.method, first.path, first.query) == ("GET", "/v1/models", "limit=1000")
    assert first.headers["x-api-key"] == KEY and first.headers["anthropic-version"]
    assert not refused.ok and refused.message == "The provider refused the key."
    _assert_no_key(refused, WRONG_KEY)
