"""What `ControlConnection.emit` sends, built without a `DriverEvent` model: the same JSON a
model would dump, a timestamp spelled as before, and source ids that never repeat and rise
within a driver (control's unique index takes them at its end)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from driver import connection
from driver.connection import ControlConnection, new_source_event_id, utc_now
from driver.protocol import DriverEvent, parse_driver_message


def _connection() -> ControlConnection:
    return ControlConnection(
        control_url="unix:///nowhere.sock", driver_instance_id="drv_1", boot_token="t", runtime="x"
    )


def test_utc_now_spells_the_millisecond_as_isoformat_did(monkeypatch: pytest.MonkeyPatch) -> None:
    for moment in (
        datetime(2026, 12, 7, 21, 39, 6, 123_000, tzinfo=UTC),
        datetime(2027, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
        datetime(2026, 2, 28, 23, 59, 59, 999_000, tzinfo=UTC),
    ):
        nanoseconds = int(moment.timestamp() * 1000) * 1_000_000 + 456_789
        monkeypatch.setattr(time, "time_ns", lambda n=nanoseconds: n)
        expected = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert utc_now() == expected
        assert utc_now() == expected  # the cached spelling, the same millisecond


def test_utc_now_follows_the_clock() -> None:
    before = datetime.now(UTC)
    now = datetime.fromisoformat(utc_now().replace("Z", "+00:00"))
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= now
    assert now <= datetime.now(UTC)


def test_source_event_ids_are_unique_rising_hex_of_32() -> None:
    ids = [new_source_event_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(len(value) == 32 and int(value, 16) >= 0 for value in ids)


def test_another_driver_process_tags_its_ids_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = new_source_event_id()
    monkeypatch.setattr(connection, "_ID_TAG", "0" * 12)
    assert new_source_event_id()[12:24] == "0" * 12 != mine[12:24]


def test_an_emitted_event_is_encoded_as_its_model_would_be() -> None:
    sink = _connection()
    payload = {"text": 'héllo "quoted"\n', "n": 3, "nested": {"list": [1, None, True]}}
    source_event_id = sink.emit("run-1", "message.delta", payload)
    sent = json.loads(sink._unacked[source_event_id])
    model = DriverEvent(**sent)
    assert sink._unacked[source_event_id] == model.model_dump_json()
    assert (model.source_event_id, model.run_id, model.kind) == (
        source_event_id,
        "run-1",
        "message.delta",
    )
    assert model.payload == payload
    # Control parses it as any driver's batch.
    frame = '{"type":"events","events":[' + sink._unacked[source_event_id] + "]}"
    assert parse_driver_message(frame).events[0] == model  # type: ignore[union-attr]


def test_an_event_without_payload_carries_an_empty_one_and_secrets_stay_masked() -> None:
    sink = _connection()
    sink.mask_secrets(["s3cr3t-value"])
    bare = json.loads(sink._unacked[sink.emit("run-1", "run.started")])
    assert bare["payload"] == {}
    masked = sink._unacked[sink.emit("run-1", "tool.output", {"text": "key=s3cr3t-value"})]
    assert "s3cr3t-value" not in masked
    assert json.loads(masked)["payload"]["text"] == "key=" + connection.SECRET_MASK


def test_an_event_control_would_refuse_fails_its_emitter_and_queues_nothing() -> None:
    sink = _connection()
    for run_id, kind, payload in (
        ("", "message.delta", {}),
        ("r" * 65, "message.delta", {}),
        ("run-1", None, {}),
        ("run-1", "message.delta", ["not", "a", "dict"]),
    ):
        with pytest.raises(ValueError):
            sink.emit(run_id, kind, payload)  # type: ignore[arg-type]
    assert sink.unacked_count == 0
    with pytest.raises(ValueError):  # a value JSON cannot hold, as the model's dump refused
        sink.emit("run-1", "message.delta", {"value": object()})
    assert sink.unacked_count == 0
