"""What one call costs, bucket by bucket, in integer USD micros: no float, no drift."""

from __future__ import annotations

from fractions import Fraction

from mosoo_core.usage import BucketPrices, cost_micros, pattern_matches, seed_rows, usd_to_micros

# Micros per million tokens: $3 input, $0.30 cache read, $3.75 cache write, $15 output,
# $20 reasoning.
PRICES = BucketPrices(
    input=3_000_000,
    cached_input=300_000,
    cache_write=3_750_000,
    output=15_000_000,
    reasoning=20_000_000,
)


def test_uncached_input_is_billed_at_the_input_price() -> None:
    assert cost_micros(PRICES, input_tokens=1_000) == 3_000  # 1000 * $3 / 1M = $0.003


def test_cache_reads_are_billed_at_the_cached_price_and_not_again_as_input() -> None:
    # 1000 prompt tokens of which 800 read from the cache: 200 * 3 + 800 * 0.30 (micros/token).
    assert cost_micros(PRICES, input_tokens=1_000, cached_input_tokens=800) == 600 + 240


def test_cache_writes_are_billed_at_the_cache_write_price_and_not_again_as_input() -> None:
    assert cost_micros(
        PRICES, input_tokens=1_000, cached_input_tokens=100, cache_creation_input_tokens=400
    ) == 500 * 3 + 100 * Fraction(3, 10) + 400 * Fraction(375, 100)


def test_output_is_billed_at_the_output_price() -> None:
    assert cost_micros(PRICES, input_tokens=0, output_tokens=2_000) == 30_000


def test_reasoning_is_part_of_output_and_billed_once_at_its_own_price() -> None:
    # 2000 output tokens of which 500 reasoning: 1500 * 15 + 500 * 20.
    assert (
        cost_micros(PRICES, input_tokens=0, output_tokens=2_000, reasoning_tokens=500)
        == 22_500 + 10_000
    )


def test_without_a_reasoning_price_reasoning_is_billed_as_output() -> None:
    prices = BucketPrices(3_000_000, 300_000, 3_750_000, 15_000_000, None)
    assert cost_micros(prices, input_tokens=0, output_tokens=2_000, reasoning_tokens=500) == 30_000


def test_counts_larger_than_their_whole_are_capped_not_billed_twice() -> None:
    assert cost_micros(PRICES, input_tokens=100, cached_input_tokens=500) == 30
    assert cost_micros(PRICES, input_tokens=0, output_tokens=10, reasoning_tokens=99) == 200


def test_a_fraction_of_a_micro_is_rounded_half_up_once_per_call() -> None:
    cheap = BucketPrices(150_000, 75_000, 150_000, 600_000, None)  # gpt-4o-mini
    assert cost_micros(cheap, input_tokens=3) == 0  # 0.45 micro
    assert cost_micros(cheap, input_tokens=4) == 1  # 0.6 micro
    assert cost_micros(cheap, input_tokens=10, output_tokens=5) == 5  # 1.5 + 3.0 = 4.5


def test_a_million_calls_sum_to_exactly_the_expected_micros() -> None:
    calls = 1_000_000
    mix = [
        # (input, cached, cache write, output, reasoning)
        (1_234, 567, 89, 321, 45),
        (98_765, 90_000, 0, 4_321, 0),
        (7, 0, 3, 1, 1),
    ]
    total = 0
    expected_per_call = []
    for tokens in mix:
        exact = (
            Fraction(tokens[0] - tokens[1] - tokens[2]) * 3
            + Fraction(tokens[1]) * Fraction(3, 10)
            + Fraction(tokens[2]) * Fraction(375, 100)
            + Fraction(tokens[3] - tokens[4]) * 15
            + Fraction(tokens[4]) * 20
        )
        expected_per_call.append(int(exact + Fraction(1, 2)))  # half up
    for index in range(calls):
        i, c, w, o, r = mix[index % 3]
        total += cost_micros(
            PRICES,
            input_tokens=i,
            cached_input_tokens=c,
            cache_creation_input_tokens=w,
            output_tokens=o,
            reasoning_tokens=r,
        )
    per_cycle = sum(expected_per_call)
    assert total == per_cycle * (calls // 3) + expected_per_call[0] * (calls % 3)


def test_calls_priced_in_whole_micros_sum_to_the_price_of_all_their_tokens_at_once() -> None:
    one = cost_micros(PRICES, input_tokens=1_000, cached_input_tokens=500, output_tokens=200)
    total = sum(
        cost_micros(PRICES, input_tokens=1_000, cached_input_tokens=500, output_tokens=200)
        for _ in range(1_000_000)
    )
    at_once = cost_micros(
        PRICES,
        input_tokens=1_000_000_000,
        cached_input_tokens=500_000_000,
        output_tokens=200_000_000,
    )
    assert one == 1_500 + 150 + 3_000
    assert total == at_once == 4_650_000_000  # $4,650 to the micro


def test_patterns_match_whole_names_with_star_for_any_characters() -> None:
    assert pattern_matches("claude-sonnet-4-*", "claude-sonnet-4-5-20250929")
    assert not pattern_matches("claude-sonnet-4-*", "claude-sonnet-3")
    assert pattern_matches("*:free", "meta-llama/llama-3-8b:free")
    assert pattern_matches("gpt-4o", "gpt-4o")
    assert not pattern_matches("gpt-4o", "gpt-4o-mini")
    assert not pattern_matches("gpt.4o", "gpt-4o")  # a dot is a dot


def test_prices_in_usd_become_exact_micros() -> None:
    assert usd_to_micros("0.075", "x") == 75_000
    assert usd_to_micros("2.50", "x") == 2_500_000
    assert usd_to_micros(0, "x") == 0


def test_the_seed_file_prices_the_common_models_with_the_date_they_were_read() -> None:
    rows = {(row.provider, row.model_pattern): row for row in seed_rows()}
    assert {"openai", "anthropic", "deepseek", "openrouter"} == {p for p, _ in rows}
    mini = rows[("openai", "gpt-4o-mini")]
    assert (mini.input_micros_per_million, mini.output_micros_per_million) == (150_000, 600_000)
    assert all(row.read_on is not None for row in rows.values())
    assert rows[("openrouter", "*:free")].input_micros_per_million == 0
