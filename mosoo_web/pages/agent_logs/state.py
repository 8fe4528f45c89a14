"""The Logs tab's state: the Agent's runs (filtered by status, purpose and time), and for the
run picked its replay (the chat's own items, read-only) and its Diagnostics."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import reflex as rx

from mosoo_core import agents, usage
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, MosooError, NotFound
from mosoo_core.runtime import pet_operations
from mosoo_core.sessions import actions, diagnostics
from mosoo_core.sessions.transcript import build_transcript
from mosoo_core.usage.reports import usage_by_run
from mosoo_web.formatting import relative_time, usage_text
from mosoo_web.pages.threads.labels import PURPOSE_LABELS
from mosoo_web.reflex_typing import event
from mosoo_web.state.chat_items import ChatItem, chat_item
from mosoo_web.state.session import current_app_ids

RANGES = {"1d": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
RANGE_LABELS = {"1d": "Last day", "7d": "Last 7 days", "30d": "Last 30 days", "all": "All time"}
STATUS_LABELS = {
    "all": "Any status",
    "active": "Active",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "expired": "Expired",
}
PURPOSE_FILTER_LABELS = {"all": "Any purpose", **PURPOSE_LABELS}


@dataclass
class RunLogRow:
    id: str = ""
    thread_id: str = ""
    title: str = ""
    status: str = ""
    purpose: str = ""
    model: str = ""
    when: str = ""
    duration: str = ""
    error_code: str = ""
    usage: str = ""  # "1,240 tokens · $0.0042", "" before its first model call


@dataclass
class PhaseRow:
    name: str = ""
    label: str = ""
    duration: str = ""
    share: str = "0%"  # of the run's wall time, as a CSS width
    detail: str = ""


@dataclass
class Fact:
    label: str = ""
    value: str = ""


@dataclass
class Diagnosis:
    """What the Diagnostics panel shows of one run."""

    phases: list[PhaseRow] = field(default_factory=list)
    total: str = ""
    facts: list[Fact] = field(default_factory=list)
    snapshot: str = ""
    error: str = ""
    setup_log: str = ""
    events_before: str = ""


@dataclass
class OperationRow:
    """One of an Assistant's sandbox operations (restart, hibernate, ...)."""

    id: str = ""
    when: str = ""
    at: str = ""  # the exact time, for the row's tooltip
    operation: str = ""
    outcome: str = ""  # done | refused | failed
    error: str = ""
    duration: str = ""


def seconds_text(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _row(run: diagnostics.RunRow, now: Any, totals: usage.UsageTotals | None) -> RunLogRow:
    duration = ""
    if run.finished_at is not None:
        duration = seconds_text((run.finished_at - run.created_at).total_seconds())
    return RunLogRow(
        id=run.run_id,
        thread_id=run.thread_id,
        title=run.thread_title or run.input_text or "Untitled",
        status=run.status,
        purpose=PURPOSE_LABELS.get(run.purpose, run.purpose),
        model=run.model,
        when=relative_time(run.created_at, now),
        duration=duration,
        error_code=run.error_code or "",
        usage=usage_text(totals),
    )


def _diagnosis(found: diagnostics.RunDiagnostics, totals: usage.UsageTotals | None) -> Diagnosis:
    total = found.seconds
    phases = [
        PhaseRow(
            name=phase.name,
            label=phase.label,
            duration=seconds_text(phase.seconds),
            share=f"{(phase.seconds / total * 100) if total > 0 else 0:.1f}%",
            detail=", ".join(f"{k}: {v}" for k, v in phase.detail.items()),
        )
        for phase in found.phases
    ]
    facts = [Fact("Run", found.run_id), Fact("Thread", found.thread_id)]
    if found.trace_id:
        facts.append(Fact("Trace", found.trace_id))
    if spent := usage_text(totals):
        facts.append(Fact("Usage", spent))
    if found.sandbox:
        facts.append(Fact("Sandbox", str(found.sandbox.get("sandbox", ""))))
        if found.sandbox.get("image"):
            facts.append(Fact("Image", str(found.sandbox["image"])))
    if found.driver is not None:
        facts += [
            Fact("Driver", f"{found.driver.runtime} {found.driver.version}".strip()),
            Fact("Capabilities", ", ".join(found.driver.capabilities) or "none reported"),
            Fact("Reconnects", str(found.driver.reconnects)),
        ]
    error = ""
    if found.error_code:
        error = f"{found.error_code}: {found.error_message or ''}".strip()
    return Diagnosis(
        phases=phases,
        total=seconds_text(total),
        facts=facts,
        snapshot=json.dumps(found.snapshot, indent=2, sort_keys=True, default=str),
        error=error,
        setup_log=found.setup_log_tail,
        events_before="\n".join(
            json.dumps({"seq": e["seq"], "type": e["type"], "payload": e["payload"]}, default=str)
            for e in found.events_before_failure
        ),
    )


def _load_runs(
    account_id: str, app_id: str, agent_id: str, status: str, purpose: str, range_key: str
) -> tuple[str, list[RunLogRow]]:
    since = utcnow() - RANGES[range_key] if range_key in RANGES else None
    with session_scope() as db:
        agent = agents.get_agent(db, account_id, app_id, agent_id)
        runs = diagnostics.agent_runs(
            db, account_id, app_id, agent_id, status=status, purpose=purpose, since=since
        )
        spent = usage_by_run(db, [run.run_id for run in runs])
    now = utcnow()
    return agent.name, [_row(run, now, spent.get(run.run_id)) for run in runs]


def _load_run(account_id: str, run_id: str) -> tuple[list[ChatItem], Diagnosis]:
    with session_scope() as db:
        found = diagnostics.run_diagnostics(db, account_id, run_id)
        events = diagnostics.run_events(db, account_id, run_id)
        totals = usage.run_usage(db, run_id)
    transcript = build_transcript(events)
    return [chat_item(item) for item in transcript.items], _diagnosis(found, totals)


def _load_operations(account_id: str, agent_id: str) -> list[OperationRow] | None:
    """The Agent's sandbox operations, newest first; None for a Task (it has no sandbox of
    its own)."""
    with session_scope() as db:
        try:
            records = pet_operations.list_operations(db, account_id, agent_id)
        except Conflict:
            return None
    now = utcnow()
    return [
        OperationRow(
            id=record.id,
            when=relative_time(record.created_at, now),
            at=record.created_at.isoformat(timespec="seconds"),
            operation=record.operation.capitalize(),
            outcome=record.outcome,
            error=record.error,
            duration=seconds_text(record.duration_ms / 1000),
        )
        for record in records
    ]


class AgentLogsState(rx.State):
    agent_id: rx.Field[str] = rx.field("")
    agent_name: rx.Field[str] = rx.field("")
    missing: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    status_filter: rx.Field[str] = rx.field("all")
    purpose_filter: rx.Field[str] = rx.field("all")
    range_filter: rx.Field[str] = rx.field("7d")
    rows: rx.Field[list[RunLogRow]] = rx.field(default_factory=list)
    selected: rx.Field[str] = rx.field("")
    replay: rx.Field[list[ChatItem]] = rx.field(default_factory=list)
    selected_thread: rx.Field[str] = rx.field("")
    answered_requests: rx.Field[list[str]] = rx.field(default_factory=list)
    # The Diagnostics panel of the run picked (a Diagnosis, one field each).
    phases: rx.Field[list[PhaseRow]] = rx.field(default_factory=list)
    total: rx.Field[str] = rx.field("")
    facts: rx.Field[list[Fact]] = rx.field(default_factory=list)
    snapshot: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")
    setup_log: rx.Field[str] = rx.field("")
    events_before: rx.Field[str] = rx.field("")
    # An Assistant's sandbox operations (`is_pet`: the section shows).
    is_pet: rx.Field[bool] = rx.field(False)
    operations: rx.Field[list[OperationRow]] = rx.field(default_factory=list)

    def _show(self, replay: list[ChatItem], found: Diagnosis) -> None:
        self.replay = replay
        self.phases, self.total, self.facts = found.phases, found.total, found.facts
        self.snapshot, self.error = found.snapshot, found.error
        self.setup_log, self.events_before = found.setup_log, found.events_before

    async def _refresh(self) -> None:
        account_id, app_id = await current_app_ids(self)
        try:
            self.agent_name, self.rows = await asyncio.to_thread(
                _load_runs,
                account_id,
                app_id,
                self.agent_id,
                self.status_filter,
                self.purpose_filter,
                self.range_filter,
            )
        except NotFound:
            self.missing, self.rows = True, []
        self.loaded = True

    async def _refresh_operations(self) -> None:
        account_id, _ = await current_app_ids(self)
        try:
            found = await asyncio.to_thread(_load_operations, account_id, self.agent_id)
        except NotFound:
            found = None
        self.is_pet, self.operations = found is not None, found or []

    @event
    async def load(self) -> None:
        self.agent_id = str(self.router.page.params.get("agent_id", "") or "")
        self.loaded, self.missing, self.selected = False, False, ""
        self.is_pet, self.operations = False, []
        self._show([], Diagnosis())
        await self._refresh()
        if not self.missing:
            await self._refresh_operations()
        if self.rows:
            await self.select(self.rows[0].id)

    @event
    async def set_status_filter(self, value: str) -> None:
        self.status_filter = value if value in STATUS_LABELS else "all"
        await self._refresh()

    @event
    async def set_purpose_filter(self, value: str) -> None:
        self.purpose_filter = value if value in PURPOSE_FILTER_LABELS else "all"
        await self._refresh()

    @event
    async def set_range_filter(self, value: str) -> None:
        self.range_filter = value if value in RANGE_LABELS else "7d"
        await self._refresh()

    @event
    async def select(self, run_id: str) -> None:
        account_id, _ = await current_app_ids(self)
        try:
            self._show(*await asyncio.to_thread(_load_run, account_id, run_id))
        except NotFound:
            self.selected = ""
            self._show([], Diagnosis())
            return
        self.selected = run_id
        self.selected_thread = next((r.thread_id for r in self.rows if r.id == run_id), "")
        self.answered_requests = []

    async def _answer(self, request_id: str, decision: str) -> Any:
        # A run still waiting for its prompt can be answered from its replay, as in its chat.
        account_id, _ = await current_app_ids(self)
        if request_id in self.answered_requests or not self.selected_thread:
            return None
        try:
            await asyncio.to_thread(
                actions.answer_permission, account_id, self.selected_thread, request_id, decision
            )
        except MosooError as error:
            return rx.toast.error(error.message)
        self.answered_requests = [*self.answered_requests, request_id]
        return None

    @event
    async def allow_once(self, request_id: str) -> Any:
        return await self._answer(request_id, "allow_once")

    @event
    async def reject(self, request_id: str) -> Any:
        return await self._answer(request_id, "reject_once")
