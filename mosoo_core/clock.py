"""One place that says what time it is, so services can be given a fixed clock in tests."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
