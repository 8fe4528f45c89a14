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
from mosoo_core.usage.service import PriceInput, PriceView, list_prices, set_app_price

__all__ = [
    "BucketPrices",
    "PriceInput",
    "PriceView",
    "UsageNumbers",
    "bucket_prices",
    "cost_micros",
    "list_prices",
    "parse_anthropic_usage",
    "parse_usage",
    "pattern_matches",
    "price_in_effect",
    "record_usage",
    "seed_prices",
    "seed_rows",
    "set_app_price",
    "usd_to_micros",
]
