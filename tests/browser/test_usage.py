"""The Usage page in Chromium: after calls of two priced models (and one without a price), the
cost chart renders, the by-model table shows each model's cost and the totals, the unpriced
model is called out, and the raw CSV download parses to the same totals."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from mosoo_core import usage
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.tables.agents import Agent
from mosoo_core.usage import PriceInput, UsageNumbers, record_usage, set_app_price
from tests.browser.conftest import WebServer
from tests.browser.test_threads import _signed_in_app

pytestmark = pytest.mark.browser


def _seed(account_id: str, app_id: str) -> None:
    """alpha-model: 2 calls of $0.60 ($2 / $8 per million; 100k in, 50k out); beta-model:
    1 call of $0.40 ($1 / $5; 300k in, 20k out); mystery-model: 1 call, no price."""
    now = utcnow()
    with session_scope() as db:
        since = now - timedelta(days=1)
        for provider, model, price_in, price_out in (
            ("openai", "alpha-model", "2", "8"),
            ("anthropic", "beta-model", "1", "5"),
        ):
            set_app_price(
                db,
                account_id,
                app_id,
                PriceInput(provider, model, price_in, price_out, effective_from=since),
                now=since,
            )
        agent = Agent(app_id=app_id, name="Usage helper", model="alpha-model")
        db.add(agent)
        db.flush()
        calls = [
            ("openai", "alpha-model", UsageNumbers(input_tokens=100_000, output_tokens=50_000)),
            ("openai", "alpha-model", UsageNumbers(input_tokens=100_000, output_tokens=50_000)),
            ("anthropic", "beta-model", UsageNumbers(input_tokens=300_000, output_tokens=20_000)),
            ("ollama", "mystery-model", UsageNumbers(input_tokens=10, output_tokens=5)),
        ]
        for n, (provider, model, numbers) in enumerate(calls):
            record_usage(
                db,
                app_id=app_id,
                provider=provider,
                model=model,
                numbers=numbers,
                agent_id=agent.id,
                purpose="preview",
                at=now - timedelta(seconds=10 - n),
            )
        usage.rebuild(db, now=now)


def test_usage_page_shows_the_chart_the_models_costs_and_a_matching_csv(
    page: Page, browser: Browser, shared_database: WebServer
) -> None:
    account_id, app_id = _signed_in_app(page, browser, shared_database, "usage")
    _seed(account_id, app_id)

    page.get_by_test_id("nav-usage").click()
    page.wait_for_url(re.compile(rf"/apps/{app_id}/usage$"))
    expect(page.get_by_test_id("page-title")).to_have_text("Usage")

    chart = page.get_by_test_id("usage-cost-chart")
    expect(chart.locator("svg.recharts-surface").first).to_be_visible()
    expect(chart.locator(".recharts-bar-rectangle").first).to_be_attached()
    tokens = page.get_by_test_id("usage-token-chart")
    expect(tokens.locator("svg.recharts-surface").first).to_be_visible()
    expect(chart.locator(".recharts-legend-item-text")).to_have_text(
        ["alpha-model", "beta-model", "mystery-model"]
    )

    rows = page.get_by_test_id("usage-by-model").get_by_test_id("usage-by-model-row")
    expect(rows).to_have_count(3)
    expect(rows.nth(0).get_by_test_id("usage-by-model-name")).to_have_text("alpha-model")
    expect(rows.nth(0).get_by_test_id("usage-by-model-cost")).to_have_text("$1.20")
    expect(rows.nth(1).get_by_test_id("usage-by-model-name")).to_have_text("beta-model")
    expect(rows.nth(1).get_by_test_id("usage-by-model-cost")).to_have_text("$0.40")
    expect(rows.nth(2).get_by_test_id("usage-by-model-name")).to_have_text("mystery-model")
    expect(rows.nth(2).get_by_test_id("usage-by-model-cost")).to_have_text("$0.00")
    expect(page.get_by_test_id("usage-by-model-total-cost")).to_have_text("$1.60")
    expect(page.get_by_test_id("usage-total-cost")).to_have_text("$1.60")
    expect(page.get_by_test_id("usage-total-calls")).to_have_text("4")
    expect(page.get_by_test_id("usage-by-agent-name")).to_have_text("Usage helper")
    expect(page.get_by_test_id("usage-unpriced")).to_contain_text("mystery-model (ollama)")

    # Another range answers from the same rollup: today is in every one.
    page.get_by_test_id("usage-range").get_by_role("radio", name="Last 7 days").click()
    week_start = utcnow().date() - timedelta(days=6)
    expect(page.get_by_test_id("usage-range-text")).to_contain_text(
        f"{week_start:%b} {week_start.day}, {week_start.year} to"
    )
    expect(page.get_by_test_id("usage-total-cost")).to_have_text("$1.60")
    page.get_by_test_id("usage-split").get_by_role("radio", name="By agent").click()
    expect(chart.locator(".recharts-legend-item-text")).to_have_text(["Usage helper"])

    with page.expect_download() as downloaded:
        page.get_by_test_id("usage-download-raw").click()
    download = downloaded.value
    assert re.fullmatch(
        r"usage-raw-\d{4}-\d{2}-\d{2}-to-\d{4}-\d{2}-\d{2}\.csv", download.suggested_filename
    )
    path = download.path()
    assert path is not None
    records = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    assert len(records) == 4 and {r["app_id"] for r in records} == {app_id}
    assert sum(int(r["cost_usd_micros"]) for r in records) == 1_600_000
    by_model: dict[str, int] = {}
    for record in records:
        by_model[record["model"]] = by_model.get(record["model"], 0) + int(
            record["cost_usd_micros"]
        )
    assert by_model == {"alpha-model": 1_200_000, "beta-model": 400_000, "mystery-model": 0}
    assert [r["unpriced"] for r in records].count("true") == 1
