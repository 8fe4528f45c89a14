"""Usage: what an App's model calls cost, by day, agent, model or purpose, from the daily
rollup (the same numbers as the console's Usage page)."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from mosoo_core import usage
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1.environments import app_for
from mosoo_web.api.v1.schemas import NO_NUL

router = APIRouter(tags=["Usage"])

DEFAULT_RANGE_DAYS = 30
DAY_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def usd(micros: int) -> str:
    """Micros as a decimal string of USD, exactly ("1.234567")."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{fraction:06d}"


class UsageNumbers(BaseModel):
    calls: int = Field(description="Model calls.")
    input_tokens: int = Field(description="Whole prompts, cache reads and writes included.")
    cached_input_tokens: int = Field(description="Prompt tokens read from the provider's cache.")
    cache_creation_input_tokens: int = Field(
        description="Prompt tokens written to the provider's cache."
    )
    output_tokens: int = Field(description="Output, reasoning included.")
    reasoning_tokens: int
    cost_usd_micros: int = Field(
        description="Cost in millionths of a USD, at the prices in effect when each call was "
        "made. Unpriced calls count 0."
    )
    cost_usd: str = Field(description="The same cost as a decimal string.", examples=["0.012500"])
    unpriced_calls: int = Field(description="Calls of a model with no price (counted at 0).")

    @classmethod
    def of(cls, totals: usage.UsageTotals) -> UsageNumbers:
        return cls(
            calls=totals.calls,
            input_tokens=totals.input_tokens,
            cached_input_tokens=totals.cached_input_tokens,
            cache_creation_input_tokens=totals.cache_creation_input_tokens,
            output_tokens=totals.output_tokens,
            reasoning_tokens=totals.reasoning_tokens,
            cost_usd_micros=totals.cost_usd_micros,
            cost_usd=usd(totals.cost_usd_micros),
            unpriced_calls=totals.unpriced_calls,
        )


class UsageGroup(UsageNumbers):
    day: date | None = Field(default=None, description="With `group_by=day`: the UTC day.")
    agent_id: str | None = Field(
        default=None, description="With `group_by=agent` (null: calls no agent made)."
    )
    agent_name: str | None = Field(
        default=None, description="The agent's name now (null if it was deleted)."
    )
    provider: str | None = Field(default=None, description="With `group_by=model`.")
    model: str | None = Field(default=None, description="With `group_by=model`.")
    purpose: str | None = Field(
        default=None,
        description="With `group_by=purpose`: `preview`, `console`, `api` or `channel`.",
    )


class UnpricedModel(BaseModel):
    provider: str
    model: str
    calls: int


class UsageReport(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    app_id: str
    from_: date = Field(alias="from", description="First UTC day of the range.")
    to: date = Field(description="Last UTC day of the range (inclusive).")
    group_by: str
    groups: list[UsageGroup] = Field(
        description="By day: every day of the range, oldest first (zeros included). "
        "Otherwise costliest first."
    )
    total: UsageNumbers
    unpriced_models: list[UnpricedModel] = Field(
        description="Models that had no price in the range: the totals leave their cost out. "
        "Set a price for them in the console."
    )

    @classmethod
    def of(cls, summary: usage.UsageSummary) -> UsageReport:
        groups = [
            UsageGroup(
                **UsageNumbers.of(group.totals).model_dump(),
                day=group.day,
                agent_id=group.agent_id,
                agent_name=group.agent_name,
                provider=group.provider,
                model=group.model,
                purpose=group.purpose,
            )
            for group in summary.groups
        ]
        return cls.model_validate(
            {
                "app_id": summary.app_id,
                "from": summary.start,
                "to": summary.end,
                "group_by": summary.group_by,
                "groups": groups,
                "total": UsageNumbers.of(summary.total),
                "unpriced_models": [
                    UnpricedModel(provider=m.provider, model=m.model, calls=m.calls)
                    for m in summary.unpriced_models
                ],
            }
        )


def _day(value: str, field: str) -> date:
    # Only YYYY-MM-DD (the pattern): pydantic's date would take a number as a Unix time.
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{field}: {value!r} is not a date (YYYY-MM-DD).", field=field) from None


def _default_start(end: date) -> date:
    try:
        return end - timedelta(days=DEFAULT_RANGE_DAYS - 1)
    except OverflowError:
        return date.min


@router.get(
    "/usage",
    response_model=UsageReport,
    response_model_by_alias=True,
    operation_id="getUsage",
    summary="Usage and cost",
    description="An App's model calls, tokens and cost from `from` to `to` (UTC days, "
    "inclusive, at most 400; default the last 30 days), grouped by `day`, `agent`, `model` or "
    "`purpose`: days rolled up completely from the daily rollup, the others (today) from the "
    "raw records, so a call counts as soon as it is made. Costs are USD micros at the prices "
    "in effect when each call was made.",
    responses=error_responses(
        404,
        invalid="`invalid_request`: `from` or `to` is not a date (YYYY-MM-DD), `from` is after "
        "`to`, the range is longer than 400 days, or `group_by` is not `day`, `agent`, `model` "
        "or `purpose` (`field` names it).",
    ),
)
async def get_usage(
    caller: CallerDep,
    app_id: Annotated[
        str | None,
        Query(
            max_length=26,
            pattern=NO_NUL,
            description="The App (default: the token owner's first App).",
        ),
    ] = None,
    start: Annotated[
        str | None,
        Query(
            alias="from",
            pattern=DAY_PATTERN,
            description="First UTC day (YYYY-MM-DD); default 29 days before `to`.",
            json_schema_extra={"format": "date"},
        ),
    ] = None,
    end: Annotated[
        str | None,
        Query(
            alias="to",
            pattern=DAY_PATTERN,
            description="Last UTC day (YYYY-MM-DD); default today.",
            json_schema_extra={"format": "date"},
        ),
    ] = None,
    group_by: Annotated[usage.GroupBy, Query(description="How to group the numbers.")] = "day",
) -> UsageReport:
    def work() -> UsageReport:
        chosen = app_for(caller.account_id, app_id)
        last = _day(end, "to") if end else utcnow().date()
        first = _day(start, "from") if start else _default_start(last)
        with session_scope() as db:
            return UsageReport.of(
                usage.summary(
                    db, caller.account_id, chosen, start=first, end=last, group_by=group_by
                )
            )

    return await run_in_threadpool(work)
