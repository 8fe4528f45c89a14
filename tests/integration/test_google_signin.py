"""Google sign-in end to end: our API and a real OpenID Connect provider, each served by
uvicorn on a loopback port, and an httpx client playing the browser (it keeps cookies and we
follow each redirect by hand to see every hop)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from sqlalchemy.engine import Engine
from sqlmodel import select

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.identity import Account
from mosoo_web.api import build_api
from mosoo_web.api.google import CALLBACK_PATH, OAUTH_COOKIE, google_sign_in_enabled
from tests.support.oidc_provider import LoopbackServer, OIDCProvider, ProviderUser

CLIENT_ID = "mosoo-test-client"
CLIENT_SECRET = "mosoo-test-secret"


@dataclass
class GoogleWorld:
    app_url: str
    provider: OIDCProvider
    browser: httpx.Client

    def start_login(self, next_path: str = "/apps") -> str:
        """Our login route; returns the provider authorize URL it redirects to."""
        response = self.browser.get(
            f"{self.app_url}/api/auth/google/login", params={"next": next_path}
        )
        assert response.status_code == 302, response.text
        assert OAUTH_COOKIE in response.cookies
        location = response.headers["location"]
        assert location.startswith(f"{self.provider.issuer}/authorize?")
        return location

    def approve(self, authorize_url: str) -> str:
        """The provider approves its current user; returns our callback URL with code and state."""
        response = self.browser.get(authorize_url)
        assert response.status_code == 302, response.text
        location = response.headers["location"]
        assert location.startswith(f"{self.app_url}{CALLBACK_PATH}?")
        return location

    def sign_in(self, next_path: str = "/apps") -> httpx.Response:
        """The whole round trip; returns our callback's answer."""
        return self.browser.get(self.approve(self.start_login(next_path)))


@pytest.fixture
def google(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[GoogleWorld]:
    app_server = LoopbackServer()
    provider = OIDCProvider(
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uri=f"{app_server.url}{CALLBACK_PATH}",
    )
    monkeypatch.setenv("MOSOO_PUBLIC_URL", app_server.url)
    monkeypatch.setenv("MOSOO_GOOGLE_CLIENT_ID", CLIENT_ID)
    monkeypatch.setenv("MOSOO_GOOGLE_CLIENT_SECRET", CLIENT_SECRET)
    monkeypatch.setenv("MOSOO_GOOGLE_ISSUER", provider.issuer)
    reset_settings_cache()
    provider.start()
    app_server.start(build_api())
    try:
        with httpx.Client(timeout=10) as browser:
            yield GoogleWorld(app_url=app_server.url, provider=provider, browser=browser)
    finally:
        app_server.stop()
        provider.stop()


def _accounts_with_email(email: str) -> list[Account]:
    with session_scope() as db:
        return list(db.exec(select(Account).where(Account.email == email)).all())


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | changes
    return urlunsplit(parts._replace(query=urlencode(query)))


def test_google_sign_in_creates_the_account_sets_the_session_cookie_and_returns_to_next(
    google: GoogleWorld,
) -> None:
    response = google.sign_in(next_path="/apps")

    assert response.status_code == 303
    assert response.headers["location"] == "/apps"
    assert "mosoo_session" in response.cookies
    me = google.browser.get(f"{google.app_url}/api/auth/me")
    assert me.status_code == 200
    assert me.json()["email"] == "ada@example.com"
    assert me.json()["name"] == "Ada Lovelace"
    assert me.json()["organization"]["id"]
    # The provider checked the PKCE verifier and spent the single-use code.
    assert google.provider.issued_tokens and not google.provider.codes


def test_google_sign_in_with_the_email_of_an_email_code_account_signs_into_that_account(
    google: GoogleWorld,
) -> None:
    with session_scope() as db:
        existing = identity.sign_in_identity(
            db, provider="email", subject="ada@example.com", email="Ada@Example.com"
        )
        existing_id = existing.id
    google.provider.user = ProviderUser(sub="google-ada", email="ada@example.com")

    assert google.sign_in().status_code == 303

    me = google.browser.get(f"{google.app_url}/api/auth/me")
    assert me.json()["id"] == existing_id
    assert len(_accounts_with_email("ada@example.com")) == 1


def test_google_sign_in_twice_with_the_same_subject_is_the_same_account(
    google: GoogleWorld,
) -> None:
    google.sign_in()
    first = google.browser.get(f"{google.app_url}/api/auth/me").json()["id"]
    google.browser.cookies.clear()

    google.sign_in()

    assert google.browser.get(f"{google.app_url}/api/auth/me").json()["id"] == first


def test_google_callback_with_a_wrong_state_is_refused_without_a_session(
    google: GoogleWorld,
) -> None:
    callback = google.approve(google.start_login())

    response = google.browser.get(_with_query(callback, state="not-the-state-we-sent"))

    assert response.status_code == 303
    assert response.headers["location"] == "/login?error=google_failed"
    assert "mosoo_session" not in response.cookies
    assert google.browser.get(f"{google.app_url}/api/auth/me").status_code == 401
    assert _accounts_with_email("ada@example.com") == []


def test_google_callback_in_a_browser_that_did_not_start_the_login_is_refused(
    google: GoogleWorld,
) -> None:
    # Login CSRF: an attacker's code and state, replayed in the victim's browser.
    callback = google.approve(google.start_login())

    with httpx.Client(timeout=10) as victim:
        response = victim.get(callback)

    assert response.status_code == 303
    assert response.headers["location"] == "/login?error=google_failed"
    assert "mosoo_session" not in response.cookies
    assert _accounts_with_email("ada@example.com") == []


def test_google_sign_in_with_an_unverified_email_is_refused_and_creates_no_account(
    google: GoogleWorld,
) -> None:
    google.provider.user = ProviderUser(
        sub="google-eve", email="eve@example.com", email_verified=False
    )

    response = google.sign_in()

    assert response.status_code == 303
    assert response.headers["location"] == "/login?error=google_unverified"
    assert "mosoo_session" not in response.cookies
    assert google.browser.get(f"{google.app_url}/api/auth/me").status_code == 401
    assert _accounts_with_email("eve@example.com") == []


def test_google_sign_in_fails_when_the_provider_rejects_our_client_secret(
    google: GoogleWorld,
) -> None:
    # The secret was rotated at the provider but not in our settings: the code exchange fails.
    google.provider.client = replace(
        google.provider.client, client_secret="rotated-at-the-provider"
    )

    response = google.sign_in()

    assert response.status_code == 303
    assert response.headers["location"] == "/login?error=google_failed"
    assert "mosoo_session" not in response.cookies
    assert google.provider.issued_tokens == []
    assert _accounts_with_email("ada@example.com") == []


def test_google_login_when_the_provider_is_unreachable_returns_to_login_with_an_error(
    google: GoogleWorld,
) -> None:
    google.provider.stop()

    response = google.browser.get(f"{google.app_url}/api/auth/google/login")

    assert response.status_code == 303
    assert response.headers["location"] == "/login?error=google_failed"


def test_google_login_next_outside_the_site_returns_home(google: GoogleWorld) -> None:
    response = google.sign_in(next_path="https://evil.example/steal")

    assert response.status_code == 303
    assert response.headers["location"] == "/"


def test_provider_refuses_an_authorization_request_without_pkce(google: GoogleWorld) -> None:
    # Guards the fake's own strictness, so the success tests above prove we really send PKCE.
    authorize_url = _with_query(google.start_login(), code_challenge="", code_challenge_method="")

    response = google.browser.get(authorize_url)

    assert response.status_code == 302
    assert "error=invalid_request" in response.headers["location"]


def test_google_routes_are_absent_when_google_is_not_configured(engine: Engine) -> None:
    assert google_sign_in_enabled() is False
    app_server = LoopbackServer()
    app_server.start(build_api())
    try:
        with httpx.Client(timeout=10) as browser:
            assert browser.get(f"{app_server.url}/api/auth/google/login").status_code == 404
            assert browser.get(f"{app_server.url}/api/auth/google/callback").status_code == 404
            assert browser.get(f"{app_server.url}/api/auth/me").status_code == 401  # the API is up
    finally:
        app_server.stop()
