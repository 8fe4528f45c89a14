"""Turning a provider's usage object into one ledger row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session

from mosoo_core.clock import utcnow
from mosoo_core.tables.sessions import DriverInstance, SessionRun
from mosoo_core.tables.usage import UsageEvent
from mosoo_core.usage._pricing import bucket_prices, cost_micros, price_in_effect


@dataclass(frozen=True)
class UsageNumbers:
    """One call's tokens, counted the OpenAI way whatever the provider: `input_tokens` is the
    whole prompt, of which `cached_input_tokens` were read from the provider's cache and
    `cache_creation_input_tokens` were written to it (Anthropic's prompt caching)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_creation_input_tokens: int = 0


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def parse_usage(usage: dict[str, Any] | None) -> UsageNumbers | None:
    """Chat Completions (`prompt_tokens` ...) and Responses (`input_tokens` ...) usage shapes."""
    if not isinstance(usage, dict):
        return None
    prompt_details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    output_details = (
        usage.get("completion_tokens_details") or usage.get("output_tokens_details") or {}
    )
    return UsageNumbers(
        input_tokens=_int(usage.get("prompt_tokens", usage.get("input_tokens"))),
        cached_input_tokens=_int(
            prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else 0
        ),
        output_tokens=_int(usage.get("completion_tokens", usage.get("output_tokens"))),
        reasoning_tokens=_int(
            output_details.get("reasoning_tokens") if isinstance(output_details, dict) else 0
        ),
    )


def parse_anthropic_usage(usage: dict[str, Any] | None) -> UsageNumbers | None:
    """Anthropic Messages usage (`input_tokens`, `cache_creation_input_tokens`,
    `cache_read_input_tokens`, `output_tokens`). Anthropic's `input_tokens` leaves out both
    cache counts; the ledger's input is the whole prompt, so they are added back in."""
    if not isinstance(usage, dict) or "output_tokens" not in usage:
        return None
    uncached = _int(usage.get("input_tokens"))
    created = _int(usage.get("cache_creation_input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    return UsageNumbers(
        input_tokens=uncached + created + read,
        cached_input_tokens=read,
        cache_creation_input_tokens=created,
        output_tokens=_int(usage.get("output_tokens")),
    )


def record_usage(
    db: Session,
    *,
    app_id: str,
    provider: str,
    model: str,
    numbers: UsageNumbers,
    agent_id: str | None = None,
    session_id: str | None = None,
    run_id: str | None = None,
    purpose: str = "preview",
    runtime: str | None = None,
    at: datetime | None = None,
) -> UsageEvent:
    """One row per model call, priced now at the price in effect at `at` (the call's time,
    default now): a later price change never rewrites it. No price: cost 0, `unpriced`.
    `purpose` is the thread's; `runtime` None: the run's (see `run_runtime`)."""
    at = at or utcnow()
    if runtime is None and run_id is not None:
        runtime = run_runtime(db, run_id)
    model = model[:200]
    price = price_in_effect(db, app_id=app_id, provider=provider, model=model, at=at)
    cost = 0
    if price is not None:
        cost = cost_micros(
            bucket_prices(price),
            input_tokens=numbers.input_tokens,
            cached_input_tokens=numbers.cached_input_tokens,
            cache_creation_input_tokens=numbers.cache_creation_input_tokens,
            output_tokens=numbers.output_tokens,
            reasoning_tokens=numbers.reasoning_tokens,
        )
    row = UsageEvent(
        app_id=app_id,
        agent_id=agent_id,
        session_id=session_id,
        run_id=run_id,
        purpose=purpose,
        provider=provider,
        model=model,
        runtime=runtime,
        input_tokens=numbers.input_tokens,
        cached_input_tokens=numbers.cached_input_tokens,
        cache_creation_input_tokens=numbers.cache_creation_input_tokens,
        output_tokens=numbers.output_tokens,
        reasoning_tokens=numbers.reasoning_tokens,
        cost_usd_micros=cost,
        unpriced=price is None,
        created_at=at,
    )
    db.add(row)
    db.flush()
    return row


def run_runtime(db: Session, run_id: str) -> str | None:
    """The runtime a run's calls come from: its frozen snapshot's, else its driver's."""
    run = db.get(SessionRun, run_id)
    if run is None:
        return None
    runtime = (run.snapshot or {}).get("runtime")
    if isinstance(runtime, str) and runtime:
        return runtime[:32]
    instance = db.get(DriverInstance, run.driver_instance_id) if run.driver_instance_id else None
    return instance.runtime if instance is not None else None
