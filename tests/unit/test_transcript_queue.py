"""Queued messages in the transcript: a message sent while the thread's run was still starting
is shown apart as queued, joins the transcript when its own run's turn comes (after the answer
to the message before it), and a Stop that cancels queued runs before the run ahead of them
ends still reads in turn."""

from __future__ import annotations

from typing import Any

from mosoo_core.sessions import MAX_PENDING_MESSAGES
from mosoo_core.sessions.transcript import Transcript, build_transcript
from tests.unit.test_transcript import Log


def _read(transcript: Transcript) -> list[tuple[str, str | None, str]]:
    """(kind, run, text or status) of each settled item: the transcript as it reads."""
    return [
        (item.kind, item.run_id, item.text if item.kind in ("user", "assistant") else item.status)
        for item in transcript.items
    ]


def _queued(transcript: Transcript) -> list[str]:
    return [item.text for item in transcript.queued]


def _first_run_waking(log: Log) -> None:
    log.add("user.message", run_id="r1", text="first")
    log.add("session.status", run_id=None, status="running")
    log.add("run.preparing", run_id="r1", stage="wake", status="waking")


def _answer(log: Log, run_id: str, text: str) -> None:
    log.add("run.started", run_id=run_id)
    log.add("agent.message.delta", run_id=run_id, message_id=f"m-{run_id}", text=text)
    log.add("run.completed", run_id=run_id, final_text=text)


def test_messages_sent_while_waking_are_queued_then_read_in_turn() -> None:
    log = Log()
    _first_run_waking(log)
    for number, text in enumerate(("second", "third", "fourth"), start=2):
        log.add("user.message", run_id=f"r{number}", text=text)
    transcript = build_transcript(log.events)
    assert _read(transcript) == [("user", "r1", "first")]
    assert _queued(transcript) == ["second", "third", "fourth"]
    assert all(item.status == "queued" for item in transcript.queued)
    assert transcript.preparing == "waking" and transcript.active_run_id == "r1"
    assert transcript.run_starting  # another message would wait its turn too

    _answer(log, "r1", "one")
    # The worker's outputs of the first run come before the next run starts.
    log.add("session_files.updated", run_id="r1", files=[{"id": "f1", "name": "a", "path": "a"}])
    transcript.apply_all(log.events)
    assert _queued(transcript) == ["second", "third", "fourth"]  # its turn has not come yet
    assert transcript.run_starting  # the next run is queued: not started either

    _answer(log, "r2", "two")
    _answer(log, "r3", "three")
    transcript.apply_all(log.events)
    assert _queued(transcript) == ["fourth"]
    _answer(log, "r4", "four")
    log.add("session.status", run_id=None, status="idle")
    transcript.apply_all(log.events)
    assert _queued(transcript) == []
    assert [row for row in _read(transcript) if row[0] in ("user", "assistant")] == [
        ("user", "r1", "first"),
        ("assistant", "r1", "one"),
        ("user", "r2", "second"),
        ("assistant", "r2", "two"),
        ("user", "r3", "third"),
        ("assistant", "r3", "three"),
        ("user", "r4", "fourth"),
        ("assistant", "r4", "four"),
    ]
    kinds = [kind for kind, _run, _text in _read(transcript)]
    assert kinds.index("outputs") < kinds.index("user", 1)  # the first run's files, then "second"
    # A reload reads the same from the whole log.
    assert _read(build_transcript(log.events)) == _read(transcript)


def test_stop_while_booting_reads_each_message_then_stopped_in_turn() -> None:
    log = Log()
    _first_run_waking(log)
    log.add("user.message", run_id="r2", text="second")
    log.add("user.message", run_id="r3", text="third")
    # Stop: the waiting runs are cancelled first (nothing left to promote), then the run.
    for run_id in ("r2", "r3", "r1"):
        log.add("run.cancelled", run_id=run_id)
    log.add("session.status", run_id=None, status="idle")
    transcript = build_transcript(log.events)
    assert _read(transcript) == [
        ("user", "r1", "first"),
        ("run_end", "r1", "cancelled"),
        ("user", "r2", "second"),
        ("run_end", "r2", "cancelled"),
        ("user", "r3", "third"),
        ("run_end", "r3", "cancelled"),
    ]
    assert _queued(transcript) == [] and transcript.active_run_id is None
    assert not transcript.run_starting and transcript.preparing == ""


def test_stop_of_a_running_run_ends_the_queued_ones_after_it() -> None:
    log = Log()
    _first_run_waking(log)
    log.add("user.message", run_id="r2", text="second")
    log.add("run.started", run_id="r1")
    log.add("agent.message.delta", run_id="r1", message_id="m1", text="Work")
    log.add("run.cancelled", run_id="r2")  # Stop: the queued run at once...
    transcript = build_transcript(log.events)
    assert _queued(transcript) == ["second"]  # ...but it reads after the run ahead ends
    assert not transcript.run_starting  # the run is running: a message would be refused
    log.add("run.cancelled", run_id="r1")  # ...which the driver reports later
    transcript.apply_all(log.events)
    assert [row for row in _read(transcript)] == [
        ("user", "r1", "first"),
        ("assistant", "r1", "Work"),
        ("run_end", "r1", "cancelled"),
        ("user", "r2", "second"),
        ("run_end", "r2", "cancelled"),
    ]


def test_no_more_messages_queue_once_the_queue_is_full() -> None:
    log = Log()
    _first_run_waking(log)
    events: list[dict[str, Any]] = []
    for number in range(MAX_PENDING_MESSAGES):
        events.append(log.add("user.message", run_id=f"q{number}", text=str(number)))
    transcript = build_transcript(log.events[:-1])
    assert transcript.run_starting
    transcript.apply(events[-1])
    assert len(transcript.queued) == MAX_PENDING_MESSAGES and not transcript.run_starting
