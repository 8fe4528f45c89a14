"""Test connection: one minimal real call to a provider with its stored key."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
from sqlmodel import Session

from mosoo_core.logs import get_logger
from mosoo_core.network import outbound
from mosoo_core.network.outbound import PROVIDERS
from mosoo_core.vault._credentials import _owned_credential, reveal_provider_key
from mosoo_core.vault._headers import provider_headers
from mosoo_core.vault.types import ConnectionResult

CONNECTION_TIMEOUT_SECONDS = 10.0
ANTHROPIC_MODELS_LIMIT = 1000
log = get_logger("mosoo.vault")


def _model_ids(payload: object) -> list[str] | None:
    # OpenAI-compatible and Anthropic lists both look like {"data": [{"id": ...}, ...]}.
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    return [
        item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)
    ]


def check_provider_connection(
    db: Session, account_id: str, app_id: str, credential_id: str
) -> ConnectionResult:
    """List the provider's models (`GET {base_url}/models`) with the stored key, as the
    gateway would send it. Says whether the key works, how long the call took and which
    models the provider offers; changes nothing."""
    credential = _owned_credential(db, account_id, app_id, credential_id)
    provider, base_url = credential.provider, credential.base_url
    api_key = reveal_provider_key(db, credential.id, app_id=app_id)
    parts = urlsplit(base_url)
    host = parts.netloc or base_url
    headers = {"accept": "application/json", **provider_headers(provider, api_key, native=True)}
    started = time.perf_counter()
    status: int | None = None
    try:
        with httpx.Client(
            # An owner typed the base URL: the guard keeps it off the operator's network.
            transport=outbound.transport(outbound.OutboundGuard(reach=PROVIDERS)),
            timeout=CONNECTION_TIMEOUT_SECONDS,
            follow_redirects=False,
        ) as client:
            answer = client.get(
                f"{base_url.rstrip('/')}/models",
                headers=headers,
                # Anthropic pages its list: 20 models by default, at most 1000 a page.
                params={"limit": ANTHROPIC_MODELS_LIMIT} if provider == "anthropic" else None,
            )
        status = answer.status_code
        latency_ms = round((time.perf_counter() - started) * 1000)
        if status in (401, 403):
            result = ConnectionResult(False, "The provider refused the key.", latency_ms=latency_ms)
        elif status >= 300:
            result = ConnectionResult(
                False, f"The provider answered HTTP {status}.", latency_ms=latency_ms
            )
        else:
            try:
                models = _model_ids(answer.json())
            except ValueError:
                models = None
            if models is None:
                result = ConnectionResult(
                    False,
                    "The provider answered, but not with a list of models. Check the base URL.",
                    latency_ms=latency_ms,
                )
            else:
                result = ConnectionResult(
                    True,
                    f"Connected in {latency_ms} ms; the provider lists {len(models)} model(s).",
                    models=models,
                    latency_ms=latency_ms,
                )
    except httpx.TimeoutException:
        latency_ms = round((time.perf_counter() - started) * 1000)
        result = ConnectionResult(
            False,
            f"{host} did not answer within {CONNECTION_TIMEOUT_SECONDS:.0f} s.",
            latency_ms=latency_ms,
        )
    except httpx.HTTPError as error:
        latency_ms = round((time.perf_counter() - started) * 1000)
        refusal = outbound.refusal_in(error)
        if refusal is None:
            message = f"Could not reach {host}."
        else:
            text = outbound.describe_refusal(
                refusal.host, refusal.reason, refusal.address, reach=PROVIDERS
            )
            message = text[:1].upper() + text[1:] + "."
        result = ConnectionResult(False, message, latency_ms=latency_ms)
    # Only ids, the outcome and the status: never the key, the headers or the answer's body.
    log.info(
        "provider_credential.tested",
        app_id=app_id,
        credential_id=credential.id,
        provider=provider,
        ok=result.ok,
        status=status,
        latency_ms=result.latency_ms,
    )
    return result
