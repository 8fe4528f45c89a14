"""ULID string identifiers: server-generated, time-sortable, stored as text.

Made here rather than by `python-ulid`'s generator: ingestion makes one for every stored
event, and the library's (a lock, a policy object, an int-to-text loop per id) took about
8% of control's GIL time under the 50-stream PostgreSQL flood of bench/events.py. Same format and guarantees: 48 bits of Unix time in
milliseconds, then 80 random bits; within one millisecond (or after the clock went back)
the random part of the previous id plus one, so ids made by one process only grow.
"""

from __future__ import annotations

import os
import threading
import time

_RANDOM_BITS = 80
_RANDOM_LIMIT = 1 << _RANDOM_BITS
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32, as ULIDs spell it
# Every 10-bit value as its two characters: an id is 13 look-ups (0.9 µs, where base64's
# b32encode took 2.4 and python-ulid's loop over characters more).
_PAIRS = tuple(first + second for first in _ALPHABET for second in _ALPHABET)
_lock = threading.Lock()
_last_ms = 0
_last_random = 0


def new_id() -> str:
    global _last_ms, _last_random
    ms = time.time_ns() // 1_000_000
    with _lock:
        if ms > _last_ms:
            random = int.from_bytes(os.urandom(10), "big")
        else:
            ms, random = _last_ms, _last_random + 1
            if random == _RANDOM_LIMIT:  # 2^80 ids in one millisecond: borrow the next one
                ms, random = ms + 1, int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_random = ms, random
    return text_of((ms << _RANDOM_BITS) | random)


def text_of(value: int, pairs: tuple[str, ...] = _PAIRS) -> str:
    """The 26 characters of a 128-bit ULID: its 130 bits (the top two always zero) as 13
    groups of 10, most significant first."""
    return (
        pairs[value >> 120]
        + pairs[(value >> 110) & 1023]
        + pairs[(value >> 100) & 1023]
        + pairs[(value >> 90) & 1023]
        + pairs[(value >> 80) & 1023]
        + pairs[(value >> 70) & 1023]
        + pairs[(value >> 60) & 1023]
        + pairs[(value >> 50) & 1023]
        + pairs[(value >> 40) & 1023]
        + pairs[(value >> 30) & 1023]
        + pairs[(value >> 20) & 1023]
        + pairs[(value >> 10) & 1023]
        + pairs[value & 1023]
    )
