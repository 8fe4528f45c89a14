"""What a real `mosoo web` answers on each side of its outermost ASGI callable (api/first.py):
the API's own answers under `/api` (its error envelope, its CORS, its 404), the console's
pages and Reflex's own backend routes everywhere else."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.conftest import WebServer

pytestmark = pytest.mark.browser


def test_the_api_answers_under_api_with_its_own_envelope(web_server: WebServer) -> None:
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        assert client.get("/api/health").status_code == 200
        refused = client.get("/api/v1/threads/01M94KH1ADYDZ3XW2G3K0KBT68")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthenticated"
        assert refused.headers["www-authenticate"].startswith("Bearer")


def test_the_api_allows_the_consoles_origin_and_no_other(web_server: WebServer) -> None:
    preflight = {
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
    }
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        own = client.options("/api/v1/threads", headers={"Origin": web_server.url, **preflight})
        assert own.status_code == 200
        assert own.headers["access-control-allow-origin"] == web_server.url
        other = client.options(
            "/api/v1/threads", headers={"Origin": "http://elsewhere.example", **preflight}
        )
        assert other.status_code == 400
        assert "access-control-allow-origin" not in other.headers
        answer = client.get("/api/health", headers={"Origin": web_server.url})
        assert answer.headers["access-control-allow-origin"] == web_server.url


def test_the_console_and_reflexs_backend_routes_are_served_as_before(
    web_server: WebServer,
) -> None:
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        assert client.get("/ping").status_code == 200  # Reflex's own backend route
        login = client.get("/login", follow_redirects=True)
        assert login.status_code == 200
        assert "text/html" in login.headers["content-type"]
