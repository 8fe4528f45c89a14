"""The usage ledger: one record per model call, from the provider's own numbers."""

from mosoo_core.usage._ledger import (
    UsageNumbers,
    parse_anthropic_usage,
    parse_usage,
    record_usage,
)

__all__ = ["UsageNumbers", "parse_anthropic_usage", "parse_usage", "record_usage"]
