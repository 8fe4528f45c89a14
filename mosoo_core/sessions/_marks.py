"""The moments of a run's life, and the phases its diagnostics show between them.

Each process writes the marks it sees when it sees them: the worker its boot steps (in the
transaction that sends the input, so a run pays no extra commit for them) and its release
steps; control the first token and the last event as it stores them; the driver's hello and
ready are the driver instance's own `boot_token_used_at` and `ready_at`. A phase is the span
from the mark before it in time (the run's `created_at` for the first) to its own mark, so
the phases of a run cover its whole life without a gap or an overlap."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from driver.protocol import DriverEvent
from mosoo_core.clock import utcnow
from mosoo_core.ids import new_id
from mosoo_core.tables.sessions import DriverInstance, RunMark, SessionRun

# Every mark in the order a run passes them, with the name of the phase that ends there.
MARKS: tuple[tuple[str, str], ...] = (
    ("dispatch", "Queued"),
    ("environment", "Environment build"),
    ("sandbox", "Sandbox"),  # "Sandbox create" or "Sandbox reuse" by its detail
    ("restore", "Checkpoint restore"),
    ("setup", "Setup script"),
    ("attachments", "Attachments"),
    ("driver_start", "Driver start"),
    ("hello", "Driver boot to hello"),
    ("ready", "Hello to ready"),
    ("input", "Input"),
    ("first_token", "First token"),
    ("last_event", "Answer"),
    ("finished", "Run end"),  # only when no driver event ended the run (a boot failure)
    ("outputs", "Outputs"),
    ("checkpoint", "Checkpoint"),
    ("teardown", "Teardown"),
)
MARK_NAMES = frozenset(name for name, _ in MARKS)
_TOKEN_KINDS = frozenset({"message.delta", "thought.delta"})
_END_KINDS = frozenset({"run.completed", "run.failed", "run.cancelled"})


@dataclass
class MarkClock:
    """The marks one process takes while it works on a run, written together later."""

    taken: dict[str, tuple[datetime, dict[str, Any]]] = field(default_factory=dict)

    def mark(self, name: str, **detail: Any) -> None:
        assert name in MARK_NAMES, name
        self.taken.setdefault(name, (utcnow(), detail))

    def write(self, db: Session, run_id: str) -> None:
        record_marks(db, run_id, self.taken)
        self.taken = {}


def record_marks(
    db: Session, run_id: str, marks: Mapping[str, tuple[datetime, dict[str, Any]]]
) -> None:
    """Add the marks the run does not have yet (a mark is written once: a retried step
    keeps its first moment)."""
    if not marks:
        return
    have = set(
        db.exec(
            select(RunMark.name).where(RunMark.run_id == run_id, col(RunMark.name).in_(list(marks)))
        ).all()
    )
    for name, (at, detail) in marks.items():
        if name not in have:
            db.add(RunMark(id=new_id(), run_id=run_id, name=name, at=at, detail=dict(detail)))
    db.flush()


# Runs whose first token control has already marked: a batch of deltas then costs no query.
# Bounded; after a restart a run's next batch looks once.
_FIRST_TOKEN_SEEN: OrderedDict[str, None] = OrderedDict()
_SEEN_MAX = 10_000


def _seen_first_token(run_id: str) -> None:
    _FIRST_TOKEN_SEEN[run_id] = None
    while len(_FIRST_TOKEN_SEEN) > _SEEN_MAX:
        _FIRST_TOKEN_SEEN.popitem(last=False)


def mark_driver_events(db: Session, run_id: str, events: Iterable[DriverEvent]) -> None:
    """Control's marks, as it stores a driver's events: the run's first token and the event
    that ended it."""
    kinds = {event.kind for event in events}
    now = utcnow()
    marks: dict[str, tuple[datetime, dict[str, Any]]] = {}
    if kinds & _TOKEN_KINDS and run_id not in _FIRST_TOKEN_SEEN:
        marks["first_token"] = (now, {})
        # Remembered once the mark is committed: a transaction rolled back (control's group
        # commit retries its batches one by one then) must not leave the run without it.
        sa.event.listen(db, "after_commit", lambda _db: _seen_first_token(run_id), once=True)
    if kinds & _END_KINDS:
        marks["last_event"] = (now, {})
    record_marks(db, run_id, marks)


@dataclass(frozen=True)
class Phase:
    name: str  # the mark that ends it
    label: str
    started_at: datetime
    ended_at: datetime
    detail: dict[str, Any]

    @property
    def seconds(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()


def run_marks(db: Session, run: SessionRun) -> dict[str, RunMark]:
    """The run's marks by name, the driver's hello and ready included."""
    marks = {m.name: m for m in db.exec(select(RunMark).where(RunMark.run_id == run.id)).all()}
    instance = db.get(DriverInstance, run.driver_instance_id) if run.driver_instance_id else None
    if instance is not None:
        moments = {"hello": instance.boot_token_used_at, "ready": instance.ready_at}
        for name, at in moments.items():
            if at is not None:
                marks[name] = RunMark(run_id=run.id, name=name, at=at, detail={})
    if "last_event" not in marks and run.finished_at is not None:
        marks["finished"] = RunMark(run_id=run.id, name="finished", at=run.finished_at, detail={})
    return marks


def run_phases(db: Session, run: SessionRun) -> list[Phase]:
    """The run's phases from its creation to its last mark, in the order they happened
    (MARKS' order among marks of the same moment: a failed boot tears down before the run
    is failed, a completed one after)."""
    rank = {name: index for index, (name, _) in enumerate(MARKS)}
    labels = dict(MARKS)
    marks = sorted(run_marks(db, run).values(), key=lambda m: (m.at, rank[m.name]))
    phases: list[Phase] = []
    previous = run.created_at
    for mark in marks:
        label = labels[mark.name]
        if mark.name == "sandbox":
            label = "Sandbox create" if mark.detail.get("created") else "Sandbox reuse"
        phases.append(Phase(mark.name, label, previous, mark.at, dict(mark.detail)))
        previous = mark.at
    return phases
