"""The model gateway's Anthropic route (`/gateway/anthropic/v1/...`) on a real control app,
with the scripted Anthropic Messages server as the provider: the grant becomes the vaulted
key as Anthropic wants it, the answer comes back byte for byte, usage is Anthropic's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from driver.protocol import BootPayload
from mosoo_core import vault
from mosoo_core.clock import utcnow
from mosoo_core.runtime.runs import plan_boot
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import ModelGrant, SessionRun
from mosoo_core.tables.usage import UsageEvent
from tests.control.conftest import ControlServer, boot_fixture
from tests.support.anthropic_server import (
    ErrorTurn,
    MessageTurn,
    ScriptedAnthropicServer,
    StreamErrorTurn,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from tests.support.processes import wait_for

PROVIDER_KEY = "sk-ant-test-SECRET-gateway-4321"
MODEL = "claude-test"
MESSAGES = "/gateway/anthropic/v1/messages"
VERSION = "2023-06-01"


@pytest.fixture
def upstream() -> Iterator[ScriptedAnthropicServer]:
    with ScriptedAnthropicServer(models=[MODEL], api_key=PROVIDER_KEY) as server:
        yield server


def _grant(
    engine: Engine, base_url: str, provider: str = "anthropic", email: str = "ctl@example.com"
) -> tuple[str, str]:
    with Session(engine) as db:
        booted = boot_fixture(db, email)
        credential = vault.create_provider_credential(
            db,
            booted.account_id,
            booted.app_id,
            vault.ProviderCredentialInput(
                name="Claude",
                provider=provider,
                base_url=base_url,
                api_key=PROVIDER_KEY,
                models=[MODEL],
            ),
        )
        run = db.get(SessionRun, booted.run_id)
        assert run is not None
        grant = driver_plane.issue_model_grant(
            db, run, credential_id=credential.id, allowed_models=[MODEL]
        )
        db.commit()
        return grant, booted.run_id


def _client(control: ControlServer) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(control.socket_path)),
        base_url="http://control",
        timeout=30,
    )


def _body(stream: bool, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": "What is the working directory?"}],
        **extra,
    }


def _usage_rows(engine: Engine) -> list[UsageEvent]:
    with Session(engine) as db:
        return list(db.exec(select(UsageEvent)).all())


def _numbers(row: UsageEvent) -> tuple[Any, ...]:
    return (
        row.provider,
        row.model,
        row.input_tokens,
        row.cached_input_tokens,
        row.cache_creation_input_tokens,
        row.output_tokens,
    )


def test_a_streamed_message_comes_back_byte_for_byte_and_records_anthropics_usage(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer
) -> None:
    upstream.add(
        MessageTurn(
            [
                ThinkingBlock(["The user wants ", "the directory."]),
                TextBlock("Let me check."),
                ToolUseBlock("bash", {"command": "pwd", "description": "Print the directory"}),
            ],
            usage={
                "input_tokens": 12,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 2000,
                "output_tokens": 57,
            },
        )
    )
    grant, run_id = _grant(engine, upstream.base_url)
    body = _body(True, thinking={"type": "enabled", "budget_tokens": 1024})
    headers = {
        "x-api-key": grant,
        "anthropic-version": VERSION,
        "anthropic-beta": "interleaved-thinking-2025-05-14",
    }
    with (
        _client(control) as client,
        client.stream("POST", f"{MESSAGES}?beta=true", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["request-id"].startswith("req_")
        raw = b"".join(response.iter_raw())
    [sent] = upstream.streamed
    assert raw == sent
    kinds = [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == [
        "message_delta",
        "message_stop",
    ]
    deltas = [
        json.loads(line[6:])["delta"]
        for line in raw.decode().splitlines()
        if line.startswith("data: ") and '"content_block_delta"' in line
    ]
    assert {d["type"] for d in deltas} == {
        "thinking_delta",
        "signature_delta",
        "text_delta",
        "input_json_delta",
    }
    tool_input = "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")
    assert json.loads(tool_input) == {"command": "pwd", "description": "Print the directory"}

    [request] = upstream.message_requests
    assert request.headers["x-api-key"] == PROVIDER_KEY
    assert "authorization" not in request.headers
    assert request.headers["anthropic-version"] == VERSION
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert request.query == "beta=true"
    assert request.body == body  # relayed unchanged
    assert grant not in json.dumps(request.headers)

    wait_for(lambda: len(_usage_rows(engine)) == 1, 10, "the usage record")
    [row] = _usage_rows(engine)
    assert row.run_id == run_id
    # Anthropic's input leaves the cache out; the ledger's input is the whole prompt.
    assert _numbers(row) == ("anthropic", MODEL, 12 + 100 + 2000, 2000, 100, 57)


def test_a_whole_message_is_relayed_and_recorded(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer
) -> None:
    upstream.add(
        MessageTurn(
            [TextBlock("The directory is /workspace.")],
            usage={"input_tokens": 30, "output_tokens": 7},
        )
    )
    grant, run_id = _grant(engine, upstream.base_url)
    with _client(control) as client:
        response = client.post(
            MESSAGES,
            json=_body(False),
            headers={"x-api-key": grant, "anthropic-version": VERSION},
        )
    assert response.status_code == 200
    answer = response.json()
    assert answer["type"] == "message" and answer["stop_reason"] == "end_turn"
    assert answer["content"] == [{"type": "text", "text": "The directory is /workspace."}]
    wait_for(lambda: len(_usage_rows(engine)) == 1, 10, "the usage record")
    [row] = _usage_rows(engine)
    assert row.run_id == run_id and _numbers(row) == ("anthropic", MODEL, 30, 0, 0, 7)


def test_a_bearer_grant_works_too_and_the_version_defaults_for_anthropic(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer
) -> None:
    """Claude Code sends `ANTHROPIC_AUTH_TOKEN` as a bearer; Anthropic still gets x-api-key,
    and a version even when the caller sent none."""
    upstream.add(MessageTurn([TextBlock("hi")], usage={"input_tokens": 3, "output_tokens": 1}))
    grant, _ = _grant(engine, upstream.base_url)
    with _client(control) as client:
        response = client.post(
            MESSAGES, json=_body(False), headers={"Authorization": f"Bearer {grant}"}
        )
    assert response.status_code == 200, response.text
    [request] = upstream.message_requests
    assert request.headers["x-api-key"] == PROVIDER_KEY
    assert request.headers["anthropic-version"] == VERSION
    assert "authorization" not in request.headers


def test_count_tokens_is_relayed_and_records_no_usage(
    control: ControlServer, engine: Engine
) -> None:
    with ScriptedAnthropicServer(api_key=PROVIDER_KEY, count_tokens=321) as upstream:
        grant, _ = _grant(engine, upstream.base_url)
        with _client(control) as client:
            counted = client.post(
                f"{MESSAGES}/count_tokens",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-api-key": grant, "anthropic-version": VERSION},
            )
            outside = client.post(
                f"{MESSAGES}/count_tokens",
                json={"model": "claude-expensive", "messages": []},
                headers={"x-api-key": grant, "anthropic-version": VERSION},
            )
            models = client.get(
                "/gateway/anthropic/v1/models",
                headers={"x-api-key": grant, "anthropic-version": VERSION},
            )
        assert (counted.status_code, counted.json()) == (200, {"input_tokens": 321})
        assert outside.status_code == 403
        assert outside.json()["error"] == {
            "type": "permission_error",
            "message": "Model 'claude-expensive' is not allowed for this run.",
            "code": "model_not_allowed",
        }
        assert [m["id"] for m in models.json()["data"]] == ["claude-test"]
        assert [r.path for r in upstream.requests] == ["/v1/messages/count_tokens", "/v1/models"]
    assert _usage_rows(engine) == []


@pytest.mark.parametrize("token", ["mgr_forged", PROVIDER_KEY, "mgr_" + "x" * 300, None])
def test_a_forged_grant_is_refused_in_anthropics_error_shape(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer, token: str | None
) -> None:
    _grant(engine, upstream.base_url)
    headers = {"anthropic-version": VERSION} | ({"x-api-key": token} if token else {})
    with _client(control) as client:
        response = client.post(MESSAGES, json=_body(True), headers=headers)
    assert response.status_code == 401
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.json()["error"]["code"] == "invalid_grant"
    assert upstream.requests == [] and _usage_rows(engine) == []


def test_an_expired_grant_or_one_of_a_finished_run_is_refused(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer
) -> None:
    expired, expired_run = _grant(engine, upstream.base_url, email="expired@example.com")
    finished, finished_run = _grant(engine, upstream.base_url, email="finished@example.com")
    with Session(engine) as db:
        row = db.exec(select(ModelGrant).where(ModelGrant.run_id == expired_run)).one()
        row.expires_at = utcnow() - timedelta(seconds=1)
        run = db.get(SessionRun, finished_run)
        assert run is not None
        driver_plane.finish_run(db, run, "completed")
        db.add(row)
        db.commit()
    with _client(control) as client:
        for grant in (expired, finished):
            response = client.post(
                MESSAGES,
                json=_body(False),
                headers={"x-api-key": grant, "anthropic-version": VERSION},
            )
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_grant"
    assert upstream.requests == [] and _usage_rows(engine) == []


@pytest.mark.parametrize(
    ("turn", "status"),
    [
        (ErrorTurn(529, "overloaded_error", "Overloaded"), 529),
        (ErrorTurn(429, "rate_limit_error", "Number of requests has exceeded", 7), 429),
        (ErrorTurn(400, "invalid_request_error", "prompt is too long"), 400),
    ],
)
def test_an_upstream_error_is_passed_on_with_its_status_and_body(
    control: ControlServer,
    engine: Engine,
    upstream: ScriptedAnthropicServer,
    turn: ErrorTurn,
    status: int,
) -> None:
    upstream.add(turn)
    grant, _ = _grant(engine, upstream.base_url)
    with _client(control) as client:
        response = client.post(
            MESSAGES, json=_body(True), headers={"x-api-key": grant, "anthropic-version": VERSION}
        )
    assert response.status_code == status
    assert response.json()["error"] == {"type": turn.type, "message": turn.message}
    if turn.retry_after:
        assert response.headers["retry-after"] == str(turn.retry_after)
    assert _usage_rows(engine) == []


def test_an_error_event_mid_stream_is_relayed_as_sent(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer
) -> None:
    upstream.add(StreamErrorTurn(text=["Partial ", "answer"]))
    grant, _ = _grant(engine, upstream.base_url)
    with (
        _client(control) as client,
        client.stream(
            "POST",
            MESSAGES,
            json=_body(True),
            headers={"x-api-key": grant, "anthropic-version": VERSION},
        ) as response,
    ):
        assert response.status_code == 200
        raw = b"".join(response.iter_raw())
    assert raw == upstream.streamed[0]
    assert raw.decode().rstrip().splitlines()[-2:] == [
        "event: error",
        'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    ]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "messages/batches"),
        ("GET", "messages/batches"),
        ("POST", "files"),
        ("POST", "complete"),
        ("GET", "messages"),
    ],
)
def test_calls_outside_messages_and_models_are_not_relayed(
    control: ControlServer,
    engine: Engine,
    upstream: ScriptedAnthropicServer,
    method: str,
    path: str,
) -> None:
    """Batches, files and the legacy API would spend or keep data outside any usage record."""
    grant, _ = _grant(engine, upstream.base_url)
    with _client(control) as client:
        response = client.request(
            method,
            f"/gateway/anthropic/v1/{path}",
            json=_body(False) if method == "POST" else None,
            headers={"x-api-key": grant, "anthropic-version": VERSION},
        )
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
    assert upstream.requests == []


def test_a_messages_compatible_endpoint_of_another_kind_gets_a_bearer_key(
    control: ControlServer, engine: Engine
) -> None:
    with ScriptedAnthropicServer(api_key=PROVIDER_KEY, accept_bearer=True) as upstream:
        upstream.add(MessageTurn([TextBlock("ok")], usage={"input_tokens": 2, "output_tokens": 1}))
        grant, _ = _grant(engine, upstream.base_url, provider="openai_compatible")
        with _client(control) as client:
            response = client.post(
                MESSAGES,
                json=_body(False),
                headers={"x-api-key": grant, "anthropic-version": VERSION},
            )
        assert response.status_code == 200, response.text
        [request] = upstream.message_requests
        assert request.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
        assert "x-api-key" not in request.headers
        assert request.headers["anthropic-version"] == VERSION


@pytest.mark.parametrize(("provider", "route"), [("anthropic", "anthropic"), ("openai", "openai")])
def test_the_run_is_told_which_gateway_route_its_provider_speaks(
    engine: Engine, provider: str, route: str
) -> None:
    """The Anthropic preset is reached through the Messages route; the others through the
    OpenAI-compatible one."""
    with Session(engine) as db:
        booted = boot_fixture(db)
        credential = vault.create_provider_credential(
            db,
            booted.account_id,
            booted.app_id,
            vault.ProviderCredentialInput(
                name="P", provider=provider, base_url="", api_key=PROVIDER_KEY, models=["m"]
            ),
        )
        agent = db.get(Agent, booted.agent_id)
        run = db.get(SessionRun, booted.run_id)
        assert agent is not None and run is not None
        agent.provider_credential_id = credential.id
        run.status, run.driver_instance_id = "queued", None
        db.add_all([agent, run])
        db.flush()
        plan, events = plan_boot(db, booted.run_id)
        assert plan is not None, events
        gateway = BootPayload.model_validate_json(plan.payload_json).execution_spec.gateway
        assert gateway.provider == route
        db.rollback()


def _anthropic_client(control: ControlServer, grant: str) -> anthropic.Anthropic:
    """The real Anthropic client, as Claude Code's SDK would dial the forwarder; here
    straight to control's socket."""
    return anthropic.Anthropic(
        api_key=grant,
        base_url="http://control/gateway/anthropic",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.HTTPTransport(uds=str(control.socket_path))),
    )


def test_the_real_anthropic_client_streams_through_the_route(
    control: ControlServer, engine: Engine, upstream: ScriptedAnthropicServer
) -> None:
    upstream.add(
        MessageTurn(
            [
                ThinkingBlock(["Run ", "pwd."]),
                TextBlock("Checking the directory."),
                ToolUseBlock("bash", {"command": "pwd"}, id="toolu_01peer"),
            ],
            usage={
                "input_tokens": 40,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 1200,
                "output_tokens": 25,
            },
        ),
        ErrorTurn(529, "overloaded_error", "Overloaded"),
    )
    grant, run_id = _grant(engine, upstream.base_url)
    with _anthropic_client(control, grant) as client:
        counted = client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        with client.messages.stream(
            model=MODEL,
            max_tokens=1024,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "What is the working directory?"}],
        ) as stream:
            text = "".join(stream.text_stream)
            message = stream.get_final_message()
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            client.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "again"}]
            )
    assert counted.input_tokens > 0
    assert text == "Checking the directory."
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    tool_use = message.content[2]
    assert tool_use.type == "tool_use" and tool_use.input == {"command": "pwd"}
    assert tool_use.id == "toolu_01peer"
    assert message.stop_reason == "tool_use"
    assert (message.usage.cache_read_input_tokens, message.usage.output_tokens) == (1200, 25)
    # The provider's own error, as the SDK reads it: status 529 and Anthropic's body.
    assert overloaded.value.status_code == 529
    assert isinstance(overloaded.value.body, dict)
    assert overloaded.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    sent_keys = {r.headers["x-api-key"] for r in upstream.requests}
    assert sent_keys == {PROVIDER_KEY}
    wait_for(lambda: len(_usage_rows(engine)) == 1, 10, "the usage record")
    [row] = _usage_rows(engine)
    assert row.run_id == run_id
    assert _numbers(row) == ("anthropic", MODEL, 40 + 1200, 1200, 0, 25)
