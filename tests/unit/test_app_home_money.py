"""How the App home writes a cost in USD micros: cents, or four decimals below a cent."""

from __future__ import annotations

import pytest

from mosoo_web.formatting import usd_text


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        (0, "$0.00"),
        (42, "<$0.0001"),
        (4_200, "$0.0042"),
        (10_000, "$0.01"),
        (1_250_003, "$1.25"),
        (1_234_567_890, "$1,234.57"),
    ],
)
def test_costs_read_as_dollars(micros: int, text: str) -> None:
    assert usd_text(micros) == text
