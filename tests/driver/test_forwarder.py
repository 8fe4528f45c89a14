"""The in-sandbox forwarder: loopback HTTP tunnelled to control's gateway over the Unix socket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from driver.forwarder import Forwarder, upstream_for
from tests.driver.conftest import GRANT, wait_for
from tests.support.control_harness import ControlHarness
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn

CHAT_BODY = {
    "model": "test-model",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


@pytest.fixture
async def forwarder(harness: ControlHarness) -> AsyncIterator[Forwarder]:
    forwarder = Forwarder(
        harness.control_url, traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )
    await forwarder.start()
    yield forwarder
    await forwarder.close()


def test_upstream_for_maps_control_urls() -> None:
    assert upstream_for("unix:///run/mosoo/control.sock") == (
        "http://control",
        "/run/mosoo/control.sock",
    )
    assert upstream_for("wss://mosoo.example.com/driver/socket") == (
        "https://mosoo.example.com",
        None,
    )
    assert upstream_for("ws://127.0.0.1:8100/prefix/driver/socket") == (
        "http://127.0.0.1:8100/prefix",
        None,
    )
    with pytest.raises(ValueError):
        upstream_for("ftp://nope")


async def test_sse_flows_chunk_by_chunk_with_the_grant_passed_through(
    forwarder: Forwarder, harness: ControlHarness, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn(["one ", "two ", "three ", "four ", "five"], delay=0.15))
    arrivals: list[tuple[float, str]] = []
    async with (
        httpx.AsyncClient(trust_env=False) as client,
        client.stream(
            "POST",
            f"{forwarder.gateway_url}/openai/v1/chat/completions",
            json=CHAT_BODY,
            headers={"Authorization": f"Bearer {GRANT}"},
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if '"content": "' in line and '"content": ""' not in line:
                arrivals.append((time.monotonic(), line))
    assert len(arrivals) == 5
    # Streamed, not buffered: the first token arrived well before the last one was produced.
    assert arrivals[-1][0] - arrivals[0][0] > 0.4
    (gateway_request,) = harness.gateway_requests
    assert gateway_request["path"] == "/gateway/openai/v1/chat/completions"
    assert gateway_request["headers"]["authorization"] == f"Bearer {GRANT}"
    assert gateway_request["headers"]["traceparent"] == forwarder.traceparent


async def test_the_openai_sdk_works_through_the_forwarder_and_keeps_its_connection(
    forwarder: Forwarder, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn("first"), TextTurn("second"))
    async with openai.AsyncOpenAI(
        base_url=f"{forwarder.gateway_url}/openai/v1",
        api_key=GRANT,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(trust_env=False),
    ) as client:
        models = await client.models.list()
        assert [m.id for m in models.data] == ["test-model"]
        for expected in ("first", "second"):
            completion = await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hi"}]
            )
            assert completion.choices[0].message.content == expected


async def test_only_gateway_paths_are_forwarded(
    forwarder: Forwarder, harness: ControlHarness
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        for path in (
            "/driver/socket",
            "/api/v1/threads",
            "/gateway/../driver/socket",
            "/gateway/%2e%2e/driver/socket",
            "/gatewayx/openai",
        ):
            response = await client.get(f"{forwarder.url}{path}")
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "forwarder_error"
    assert harness.gateway_requests == []


async def test_a_raw_dot_dot_path_cannot_climb_out_of_the_gateway(
    forwarder: Forwarder, harness: ControlHarness
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", forwarder.port)
    writer.write(b"GET /gateway/../driver/socket HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), timeout=5)
    writer.close()
    assert response.startswith(b"HTTP/1.1 404 ")
    assert harness.gateway_requests == []


async def test_gateway_errors_come_back_unchanged(forwarder: Forwarder) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.post(
            f"{forwarder.gateway_url}/openai/v1/chat/completions",
            json=CHAT_BODY,
            headers={"Authorization": "Bearer wrong"},
        )
    assert response.status_code == 401
    assert response.json() == {"error": {"code": "unauthenticated", "message": "bad grant"}}


async def test_a_client_that_goes_away_stops_the_upstream_stream(
    forwarder: Forwarder, model_server: ScriptedOpenAIServer
) -> None:
    model_server.add(TextTurn([f"w{i} " for i in range(200)], delay=0.02))
    url = f"{forwarder.gateway_url}/openai/v1/chat/completions"
    headers = {"Authorization": f"Bearer {GRANT}"}
    async with (
        httpx.AsyncClient(trust_env=False) as client,
        client.stream("POST", url, json=CHAT_BODY, headers=headers) as response,
    ):
        async for line in response.aiter_lines():
            if '"w1 "' in line:
                break
    await wait_for(
        lambda: model_server.streams_aborted == 1, timeout=5, what="the upstream stream to stop"
    )
    assert model_server.streams_completed == 0


async def test_an_unreachable_control_is_a_502(socket_dir: Path) -> None:
    forwarder = Forwarder(f"unix://{socket_dir}/absent.sock")
    await forwarder.start()
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            response = await client.post(
                f"{forwarder.gateway_url}/openai/v1/chat/completions", json=CHAT_BODY
            )
        assert response.status_code == 502
        assert "control is unreachable" in response.json()["error"]["message"]
    finally:
        await forwarder.close()


async def test_close_ends_open_client_connections(forwarder: Forwarder) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", forwarder.port)
    await forwarder.close()
    assert await asyncio.wait_for(reader.read(), timeout=5) == b""
    writer.close()
