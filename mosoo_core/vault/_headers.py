"""How a provider key travels upstream: used by the model gateway and the connection test."""

from __future__ import annotations

ANTHROPIC_VERSION = "2023-06-01"


def provider_headers(provider: str, api_key: str | None, *, native: bool = False) -> dict[str, str]:
    """The headers that carry a provider key upstream. On the OpenAI-compatible API every
    provider (Anthropic's compatibility layer included) takes a Bearer key; `native=True` is
    for a provider's own API (the gateway's Anthropic route, the connection test), where
    Anthropic wants `x-api-key` and a version."""
    if not api_key:
        return {}
    if native and provider == "anthropic":
        return {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}
    return {"authorization": f"Bearer {api_key}"}
