"""Hashing of sign-in secrets: only digests are stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from mosoo_core.settings import get_settings


def random_token() -> str:
    """A 256-bit URL-safe random token."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    # High-entropy tokens need no key; a plain digest keeps them valid across key changes.
    return hashlib.sha256(token.encode()).hexdigest()


def code_digest(email: str, code: str) -> str:
    # Six digits are guessable offline, so the digest is keyed with the server secret.
    key = get_settings().resolved_secret_key().encode()
    return hmac.new(key, f"{email}\x00{code}".encode(), hashlib.sha256).hexdigest()


def new_code() -> str:
    return f"{secrets.randbelow(1_000_000):06d}"
