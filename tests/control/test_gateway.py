"""The model gateway: a grant becomes the provider key inside control only."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from driver.protocol import BootPayload
from mosoo_core import usage, vault
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.identity import App, Organization
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tables.usage import UsageEvent
from tests.control.conftest import ControlServer, boot_fixture
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn
from tests.support.processes import wait_for

PROVIDER_KEY = "sk-test-SECRET-gateway-1234"


@pytest.fixture
def upstream() -> ScriptedOpenAIServer:
    with ScriptedOpenAIServer(models=["test-model"]) as server:
        yield server


def _grant(engine: Engine, base_url: str, models: list[str] | None = None) -> tuple[str, str]:
    with Session(engine) as db:
        booted = boot_fixture(db)
        credential = vault.create_provider_credential(
            db,
            booted.account_id,
            booted.app_id,
            vault.ProviderCredentialInput(
                name="Local",
                provider="openai_compatible",
                base_url=base_url,
                api_key=PROVIDER_KEY,
                models=["test-model"],
            ),
        )
        run = db.get(SessionRun, booted.run_id)
        assert run is not None
        grant = driver_plane.issue_model_grant(
            db, run, credential_id=credential.id, allowed_models=models or ["test-model"]
        )
        db.commit()
        return grant, booted.run_id


def _client(control: ControlServer) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(control.socket_path)),
        base_url="http://control",
        timeout=30,
    )


def test_streamed_call_reaches_provider_with_the_real_key_and_records_usage(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer
) -> None:
    upstream.add(
        TextTurn(
            "Hello from the provider",
            usage={"prompt_tokens": 11, "completion_tokens": 4, "cached_tokens": 3},
        )
    )
    grant, run_id = _grant(engine, upstream.base_url)
    body = {"model": "test-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with (
        _client(control) as client,
        client.stream(
            "POST",
            "/gateway/openai/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {grant}"},
        ) as response,
    ):
        assert response.status_code == 200
        raw = b"".join(response.iter_raw())
    text = "".join(
        (json.loads(line[5:])["choices"][0]["delta"].get("content") or "")
        for line in raw.decode().splitlines()
        if line.startswith("data:")
        and line.strip() != "data: [DONE]"
        and json.loads(line[5:]).get("choices")
    )
    assert text == "Hello from the provider"
    [request] = upstream.chat_requests
    assert request.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert grant not in json.dumps(request.headers)

    def usage_rows() -> list[UsageEvent]:
        with Session(engine) as db:
            return list(db.exec(select(UsageEvent)).all())

    # The record is written once the stream has been relayed to the end.
    wait_for(lambda: len(usage_rows()) == 1, 10, "the usage record")
    [row] = usage_rows()
    assert (
        row.run_id,
        row.model,
        row.input_tokens,
        row.output_tokens,
        row.cached_input_tokens,
    ) == (run_id, "test-model", 11, 4, 3)


def test_a_call_is_recorded_at_the_apps_price_and_an_unpriced_one_is_flagged(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer
) -> None:
    for _ in range(2):
        upstream.add(
            TextTurn(
                "Priced",
                usage={"prompt_tokens": 1000, "completion_tokens": 10, "cached_tokens": 400},
            )
        )
    grant, run_id = _grant(engine, upstream.base_url)
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}

    def call() -> None:
        with _client(control) as client:
            response = client.post(
                "/gateway/openai/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {grant}"},
            )
            assert response.status_code == 200

    def usage_rows() -> list[UsageEvent]:
        with Session(engine) as db:
            return list(db.exec(select(UsageEvent).order_by(UsageEvent.created_at)).all())

    call()
    wait_for(lambda: len(usage_rows()) == 1, 10, "the unpriced usage record")
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        app = db.get(App, run.app_id)
        assert app is not None
        owner = db.get(Organization, app.organization_id)
        assert owner is not None
        usage.set_app_price(
            db,
            owner.owner_account_id,
            app.id,
            usage.PriceInput("openai_compatible", "test-*", "2", "8", cached_input_price="0.5"),
        )
        db.commit()
    call()
    wait_for(lambda: len(usage_rows()) == 2, 10, "the priced usage record")
    first, second = usage_rows()
    assert (first.cost_usd_micros, first.unpriced) == (0, True)
    # 600 * $2 + 400 * $0.50 + 10 * $8 per million tokens.
    assert (second.cost_usd_micros, second.unpriced) == (1_200 + 200 + 80, False)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_provider_on_the_operators_network_is_refused_unless_allowed(
    control: ControlServer,
    engine: Engine,
    upstream: ScriptedOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
) -> None:
    # The base URL is the owner's: off (the default), a run cannot make control call into
    # the operator's own network (here loopback), on either route.
    monkeypatch.setenv("MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS", "false")
    reset_settings_cache()
    grant, _run_id = _grant(engine, upstream.base_url)
    path = "chat/completions" if api == "openai" else "messages"
    with _client(control) as client:
        response = client.post(
            f"/gateway/{api}/v1/{path}",
            json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {grant}"},
        )
    assert response.status_code == 502
    text = response.text
    assert "upstream_refused" in text and "MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS" in text
    assert upstream.requests == []
    assert PROVIDER_KEY not in text and "127.0.0.1" not in text
    with Session(engine) as db:
        assert db.exec(select(UsageEvent)).all() == []


@pytest.mark.parametrize("token", ["mgr_forged", "sk-anything", "mgr_" + "x" * 300])
def test_unknown_grants_are_refused(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer, token: str
) -> None:
    _grant(engine, upstream.base_url)
    with _client(control) as client:
        response = client.post(
            "/gateway/openai/v1/chat/completions",
            json={"model": "test-model"},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 401
    assert upstream.requests == []


def test_only_model_calls_and_model_listing_are_relayed(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer
) -> None:
    """The key behind a grant is the owner's account key: a sandbox must not reach their
    files, batches, fine-tunes or assistants through it, to read, spend or delete."""
    grant, _ = _grant(engine, upstream.base_url)
    refused = [
        ("POST", "files"),
        ("GET", "files"),
        ("POST", "batches"),
        ("POST", "fine_tuning/jobs"),
        ("POST", "assistants"),
        ("POST", "vector_stores"),
        ("POST", "audio/speech"),
        ("POST", "images/generations"),
        ("GET", "chat/completions"),
        ("POST", "chat/completions/../files"),
        ("POST", "models"),
    ]
    with _client(control) as client:
        for method, path in refused:
            response = client.request(
                method,
                f"/gateway/openai/v1/{path}",
                json={"model": "test-model"} if method == "POST" else None,
                headers={"Authorization": f"Bearer {grant}"},
            )
            assert response.status_code == 404, (method, path)
            assert response.json()["error"]["code"] == "not_offered", (method, path)
        listed = client.get(
            "/gateway/openai/v1/models", headers={"Authorization": f"Bearer {grant}"}
        )
    assert listed.status_code == 200
    assert [r.path for r in upstream.requests] == ["/v1/models"]
    with Session(engine) as db:
        assert db.exec(select(UsageEvent)).all() == []


def test_a_model_outside_the_grant_is_refused(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer
) -> None:
    grant, _ = _grant(engine, upstream.base_url)
    with _client(control) as client:
        response = client.post(
            "/gateway/openai/v1/chat/completions",
            json={"model": "gpt-expensive"},
            headers={"Authorization": f"Bearer {grant}"},
        )
    assert response.status_code == 403 and response.json()["error"]["code"] == "model_not_allowed"


def test_grant_dies_with_its_run(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer
) -> None:
    grant, run_id = _grant(engine, upstream.base_url)
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        driver_plane.finish_run(db, run, "completed")
        db.commit()
    with _client(control) as client:
        response = client.post(
            "/gateway/openai/v1/chat/completions",
            json={"model": "test-model"},
            headers={"Authorization": f"Bearer {grant}"},
        )
    assert response.status_code == 401


def test_streamed_responses_call_records_usage_from_response_completed(
    control: ControlServer, engine: Engine, upstream: ScriptedOpenAIServer
) -> None:
    upstream.add(
        TextTurn(
            "Hello over Responses",
            usage={
                "prompt_tokens": 21,
                "completion_tokens": 5,
                "cached_tokens": 8,
                "reasoning_tokens": 2,
            },
        )
    )
    grant, run_id = _grant(engine, upstream.base_url)
    body = {
        "model": "test-model",
        "stream": True,
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hi"}],
    }
    with (
        _client(control) as client,
        client.stream(
            "POST",
            "/gateway/openai/v1/responses",
            json=body,
            headers={"Authorization": f"Bearer {grant}"},
        ) as response,
    ):
        assert response.status_code == 200
        raw = b"".join(response.iter_raw())
    events = [
        json.loads(line[5:]) for line in raw.decode().splitlines() if line.startswith("data:")
    ]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert (
        "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        == "Hello over Responses"
    )
    [request] = upstream.responses_requests
    assert request.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert (
        request.body == body
    )  # relayed unchanged (no stream_options: usage comes in response.completed)

    def usage_rows() -> list[UsageEvent]:
        with Session(engine) as db:
            return list(db.exec(select(UsageEvent)).all())

    wait_for(lambda: len(usage_rows()) == 1, 10, "the usage record")
    [row] = usage_rows()
    assert (
        row.run_id,
        row.model,
        row.input_tokens,
        row.output_tokens,
        row.cached_input_tokens,
        row.reasoning_tokens,
    ) == (
        run_id,
        "test-model",
        21,
        5,
        8,
        2,
    )


@pytest.mark.parametrize(
    ("provider", "base_url", "api_style"),
    [
        ("openai", "", "responses"),
        ("deepseek", "", "chat_completions"),
        ("openrouter", "", "chat_completions"),
        ("ollama", "", "chat_completions"),
        ("openai_compatible", "http://10.0.0.5:8000/v1", "chat_completions"),
    ],
)
def test_the_openai_runtime_uses_the_responses_api_only_for_openai(
    engine: Engine, provider: str, base_url: str, api_style: str
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        credential = vault.create_provider_credential(
            db,
            booted.account_id,
            booted.app_id,
            vault.ProviderCredentialInput(
                name="P", provider=provider, base_url=base_url, api_key=PROVIDER_KEY, models=["m"]
            ),
        )
        agent = db.get(Agent, booted.agent_id)
        run = db.get(SessionRun, booted.run_id)
        assert agent is not None and run is not None
        agent.provider_credential_id = credential.id
        run.status, run.driver_instance_id = "queued", None  # as a freshly sent message leaves it
        db.add_all([agent, run])
        db.flush()
        plan, events = plan_boot(db, booted.run_id)
        assert plan is not None, events
        gateway = BootPayload.model_validate_json(plan.payload_json).execution_spec.gateway
        assert (gateway.provider, gateway.api_style) == ("openai", api_style)
        db.rollback()
