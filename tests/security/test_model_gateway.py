"""Model grants at the gateway of a real `mosoo control` (HTTP over its Unix socket), with
the scripted OpenAI-compatible server as the provider; `usage_event` is read afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core.clock import utcnow
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import ModelGrant
from mosoo_core.tables.usage import UsageEvent
from tests.security.conftest import Control, count, issue_run_grant, queued_run, run_row, update
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

PROVIDER_KEY = "sk-test-security-gateway-9876"
CHAT = "/gateway/openai/v1/chat/completions"
BODY = {"model": "test-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def provider() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=["test-model"]) as server:
        yield server


def _grant_for_a_run(engine: Engine, provider: ScriptedOpenAIServer, email: str) -> tuple[str, str]:
    """A real queued run with a grant issued by the service the worker uses at boot."""
    with Session(engine) as db:
        queued = queued_run(db, email)
        grant = issue_run_grant(db, queued, provider.base_url, PROVIDER_KEY)
        db.commit()
        return grant, queued.run_id


def _call(control: Control, grant: str) -> httpx.Response:
    with control.http() as client:
        response = client.post(CHAT, json=BODY, headers={"Authorization": f"Bearer {grant}"})
        response.read()
        return response


def _one_call_goes_through(
    control: Control, engine: Engine, provider: ScriptedOpenAIServer, grant: str, run_id: str
) -> None:
    provider.add(TextTurn("fine", usage={"prompt_tokens": 3, "completion_tokens": 1}))
    assert _call(control, grant).status_code == 200
    wait_for(
        lambda: count(engine, UsageEvent, UsageEvent.run_id == run_id) == 1, 20, "the usage record"
    )


def test_an_expired_grant_is_refused_and_records_no_usage(
    control: Control, engine: Engine, provider: ScriptedOpenAIServer
) -> None:
    """PROTOCOL: the execution spec carries "a grant: an opaque token bound to the run, the
    provider credential and the allowed models, expiring with the run"; PRODUCT: "the driver
    gets a short-lived grant for the model gateway"."""
    grant, run_id = _grant_for_a_run(engine, provider, "expired-grant@example.com")
    _one_call_goes_through(control, engine, provider, grant, run_id)
    update(
        engine, ModelGrant, ModelGrant.run_id == run_id, expires_at=utcnow() - timedelta(seconds=1)
    )
    refused = _call(control, grant)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_grant"
    assert len(provider.chat_requests) == 1  # the provider never saw the refused call
    assert count(engine, UsageEvent, UsageEvent.run_id == run_id) == 1


def test_a_grant_of_a_finished_run_is_refused_and_records_no_usage(
    control: Control, engine: Engine, provider: ScriptedOpenAIServer
) -> None:
    """PROTOCOL: a grant is "bound to the run ... expiring with the run"; README: "the driver
    presents a per-run grant"."""
    grant, run_id = _grant_for_a_run(engine, provider, "finished-grant@example.com")
    _one_call_goes_through(control, engine, provider, grant, run_id)
    with Session(engine) as db:
        driver_plane.finish_run(db, run_row(db, run_id), "completed")
        db.commit()
    refused = _call(control, grant)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_grant"
    assert len(provider.chat_requests) == 1
    assert count(engine, UsageEvent, UsageEvent.run_id == run_id) == 1


def test_a_provider_key_is_not_a_grant(
    control: Control, engine: Engine, provider: ScriptedOpenAIServer
) -> None:
    """README: "provider keys never enter a sandbox" and "control swaps [the grant] for the
    real key in memory": the key itself, or a forged grant, opens nothing."""
    _grant_for_a_run(engine, provider, "key-not-grant@example.com")
    for token in (PROVIDER_KEY, "mgr_forged-grant"):
        refused = _call(control, token)
        assert refused.status_code == 401, token
    assert provider.requests == [] and count(engine, UsageEvent) == 0
