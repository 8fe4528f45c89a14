"""The web process's outermost ASGI callable: requests under `/api` reach the API app, the
rest (pages, Reflex's websocket and uploads, lifespan events) reach the console's app."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Receive, Scope, Send

from mosoo_web.api.first import ApiFirst


class Recorder:
    def __init__(self, name: str, calls: list[tuple[str, str]]) -> None:
        self.name = name
        self.calls = calls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls.append((self.name, scope.get("path", scope["type"])))


async def _nothing() -> dict[str, object]:
    return {}


async def _drop(message: dict[str, object]) -> None:
    return None


def _served_by(scope: Scope) -> str:
    calls: list[tuple[str, str]] = []
    first = ApiFirst(api=Recorder("api", calls), console=Recorder("console", calls))
    asyncio.run(first(scope, _nothing, _drop))
    assert len(calls) == 1
    return calls[0][0]


@pytest.mark.parametrize(
    ("kind", "path", "served_by"),
    [
        ("http", "/api", "api"),
        ("http", "/api/health", "api"),
        ("http", "/api/v1/threads/01ABC", "api"),
        ("http", "/api/v1/threads/a%0Ab", "api"),
        ("websocket", "/api/terminal/01ABC", "api"),
        ("http", "/", "console"),
        ("http", "/apis", "console"),
        ("http", "/apps/01ABC/agents", "console"),
        ("http", "/ping", "console"),
        ("http", "/_upload", "console"),
        ("websocket", "/_event", "console"),
    ],
)
def test_requests_under_api_reach_the_api_app_and_the_rest_the_console(
    kind: str, path: str, served_by: str
) -> None:
    assert _served_by({"type": kind, "path": path}) == served_by


def test_lifespan_events_reach_the_console_app_which_runs_the_lifespan_tasks() -> None:
    assert _served_by({"type": "lifespan"}) == "console"
