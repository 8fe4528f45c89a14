"""ULID string identifiers: server-generated, time-sortable, stored as text."""

from ulid import ULID


def new_id() -> str:
    return str(ULID())
