"""The usage ledger: one record per model call, from the provider's own numbers, priced when
it is written (see _pricing for the rule)."""

from mosoo_core.usage._ledger import (
    UsageNumbers,
    parse_anthropic_usage,
    parse_usage,
    record_usage,
)
from mosoo_core.usage._pricing import (
    BucketPrices,
    bucket_prices,
    cost_micros,
    pattern_matches,
    price_in_effect,
    seed_prices,
    seed_rows,
    usd_to_micros,
)
from mosoo_core.usage._rollups import (
    PruneResult,
    RollupResult,
    catch_up,
    maintain,
    prune,
    rebuild,
    roll_up_day,
)
from mosoo_core.usage.daily import SPLITS, DailyPart, SplitBy, daily_breakdown
from mosoo_core.usage.export import EXPORT_KINDS, ExportKind, UsageCsv, usage_csv
from mosoo_core.usage.overview import CostTotal, app_cost
from mosoo_core.usage.reports import (
    GROUPS,
    MAX_RANGE_DAYS,
    GroupBy,
    UnpricedModel,
    UsageGroup,
    UsageSummary,
    UsageTotals,
    check_range,
    run_usage,
    summary,
    usage_of_run,
)
from mosoo_core.usage.service import PriceInput, PriceView, list_prices, set_app_price

__all__ = [
    "EXPORT_KINDS",
    "GROUPS",
    "MAX_RANGE_DAYS",
    "SPLITS",
    "BucketPrices",
    "CostTotal",
    "DailyPart",
    "ExportKind",
    "GroupBy",
    "PriceInput",
    "PriceView",
    "PruneResult",
    "RollupResult",
    "SplitBy",
    "UnpricedModel",
    "UsageCsv",
    "UsageGroup",
    "UsageNumbers",
    "UsageSummary",
    "UsageTotals",
    "app_cost",
    "bucket_prices",
    "catch_up",
    "check_range",
    "cost_micros",
    "daily_breakdown",
    "list_prices",
    "maintain",
    "parse_anthropic_usage",
    "parse_usage",
    "pattern_matches",
    "price_in_effect",
    "prune",
    "rebuild",
    "record_usage",
    "roll_up_day",
    "run_usage",
    "seed_prices",
    "seed_rows",
    "set_app_price",
    "summary",
    "usage_csv",
    "usage_of_run",
    "usd_to_micros",
]
