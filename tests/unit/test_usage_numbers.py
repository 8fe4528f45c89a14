"""Provider usage objects become the ledger's numbers: the whole prompt as input, with the
cache reads and writes inside it, whichever API the call used."""

from __future__ import annotations

import json

from mosoo_core.control.gateway import AnthropicUsageTap, OpenAIUsageTap
from mosoo_core.usage import UsageNumbers, parse_anthropic_usage, parse_usage


def _sse(*events: dict[str, object]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def test_anthropic_usage_adds_the_cache_counts_back_into_the_input() -> None:
    numbers = parse_anthropic_usage(
        {
            "input_tokens": 5,
            "cache_creation_input_tokens": 40,
            "cache_read_input_tokens": 300,
            "cache_creation": {"ephemeral_5m_input_tokens": 40},
            "output_tokens": 9,
            "service_tier": "standard",
        }
    )
    assert numbers == UsageNumbers(
        input_tokens=345, cached_input_tokens=300, cache_creation_input_tokens=40, output_tokens=9
    )


def test_anthropic_usage_without_output_tokens_is_no_usage() -> None:
    assert parse_anthropic_usage({"input_tokens": 12}) is None  # a count_tokens answer
    assert parse_anthropic_usage(None) is None


def test_openai_usage_has_no_cache_writes() -> None:
    numbers = parse_usage(
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}
    )
    assert numbers == UsageNumbers(input_tokens=10, cached_input_tokens=4, output_tokens=2)


def test_the_anthropic_tap_takes_input_from_message_start_and_output_from_message_delta() -> None:
    stream = _sse(
        {
            "type": "message_start",
            "message": {
                "model": "claude-x-20250101",
                "usage": {
                    "input_tokens": 7,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 50,
                    "output_tokens": 1,
                },
            },
        },
        {"type": "ping"},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 33},
        },
        {"type": "message_stop"},
    )
    tap = AnthropicUsageTap(streaming=True)
    for cut in range(0, len(stream), 17):  # events split anywhere across chunks
        tap.feed(stream[cut : cut + 17])
    tap.finish()
    assert tap.model == "claude-x-20250101"
    assert tap.numbers() == UsageNumbers(input_tokens=57, cached_input_tokens=50, output_tokens=33)


def test_the_anthropic_tap_takes_the_cumulative_counts_of_the_last_message_delta() -> None:
    """Newer answers repeat every count in `message_delta` (null where unknown)."""
    start = {"input_tokens": 100, "cache_read_input_tokens": 0, "output_tokens": 1}
    stream = _sse(
        {"type": "message_start", "message": {"model": "m", "usage": start}},
        {
            "type": "message_delta",
            "usage": {"input_tokens": 120, "cache_read_input_tokens": None, "output_tokens": 5},
        },
        {
            "type": "message_delta",
            "usage": {"input_tokens": 120, "cache_creation_input_tokens": 8, "output_tokens": 9},
        },
    )
    tap = AnthropicUsageTap(streaming=True)
    tap.feed(stream)
    tap.finish()
    assert tap.numbers() == UsageNumbers(
        input_tokens=128, cache_creation_input_tokens=8, output_tokens=9
    )


def test_a_whole_message_and_an_openai_answer_are_read_by_their_own_tap() -> None:
    whole = {"type": "message", "model": "m", "usage": {"input_tokens": 4, "output_tokens": 2}}
    anthropic = AnthropicUsageTap(streaming=False)
    anthropic.feed(json.dumps(whole).encode())
    anthropic.finish()
    assert anthropic.numbers() == UsageNumbers(input_tokens=4, output_tokens=2)
    openai = OpenAIUsageTap(streaming=False)
    openai.feed(json.dumps(whole).encode())
    openai.finish()
    assert openai.numbers() == UsageNumbers(input_tokens=4, output_tokens=2)
