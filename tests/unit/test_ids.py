"""Our ULIDs: the format python-ulid reads back, the time they were made, and ids that only
grow within a process (same millisecond, a clock set back, threads at once)."""

from __future__ import annotations

import threading
import time

import pytest
from ulid import ULID

from mosoo_core import ids


@pytest.mark.parametrize(
    "value", [0, 1, 1023, 1 << 80, (1 << 128) - 1, (1_796_534_020_310 << 80) | 0xDEADBEEF]
)
def test_the_text_is_python_ulids_for_the_same_value(value: int) -> None:
    assert ids.text_of(value) == str(ULID.from_int(value))


def test_an_id_carries_the_time_it_was_made() -> None:
    before = time.time()
    made = ULID.from_str(ids.new_id())
    assert before - 0.002 <= made.timestamp <= time.time() + 0.002


@pytest.fixture(autouse=True)
def restored_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests below move the generator's last id into the future: put it back after, or
    every id this process makes later would carry that time."""
    monkeypatch.setattr(ids, "_last_ms", ids._last_ms)
    monkeypatch.setattr(ids, "_last_random", ids._last_random)


def _frozen_clock(monkeypatch: pytest.MonkeyPatch, ms: int) -> None:
    monkeypatch.setattr(ids.time, "time_ns", lambda: ms * 1_000_000)


def test_ids_in_one_millisecond_and_after_the_clock_goes_back_only_grow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _frozen_clock(monkeypatch, 1_900_000_000_000)
    same_ms = [ids.new_id() for _ in range(1000)]
    assert same_ms == sorted(same_ms) and len(set(same_ms)) == 1000
    assert {ULID.from_str(value).milliseconds for value in same_ms} == {1_900_000_000_000}
    _frozen_clock(monkeypatch, 1_899_999_999_000)  # a second back
    assert ids.new_id() > same_ms[-1]


def test_the_random_part_running_out_borrows_the_next_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _frozen_clock(monkeypatch, 1_900_000_000_500)
    first = ids.new_id()
    monkeypatch.setattr(ids, "_last_random", (1 << 80) - 1)
    after = ids.new_id()
    assert after > first
    assert ULID.from_str(after).milliseconds == 1_900_000_000_501


def test_ids_made_by_threads_at_once_are_all_different() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(ids.new_id() for _ in range(20_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [value for out in made for value in out]
    assert len(every) == 80_000
    assert len(set(every)) == len(every)
    assert all(out == sorted(out) for out in made)
