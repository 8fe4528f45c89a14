"""The Logs tab's Diagnostics show a traced run's trace id as a fact, and nothing for an
untraced one."""

from __future__ import annotations

from datetime import UTC, datetime

from mosoo_core import tracing
from mosoo_core.sessions import diagnostics
from mosoo_web.pages.agent_logs.state import Fact, _diagnosis

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _run(traceparent: str) -> diagnostics.RunDiagnostics:
    return diagnostics.RunDiagnostics(
        run_id="run_1",
        thread_id="thread_1",
        status="completed",
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        finished_at=None,
        error_code=None,
        error_message=None,
        snapshot={"traceparent": traceparent},
        phases=[],
        sandbox={},
        driver=None,
        setup_log_tail="",
        trace_id=tracing.trace_id_of(traceparent),
    )


def test_a_traced_run_shows_its_trace_id_among_the_facts() -> None:
    facts = _diagnosis(_run(TRACEPARENT), None).facts
    assert Fact("Trace", "0af7651916cd43dd8448eb211c80319c") in facts


def test_an_untraced_run_shows_no_trace_fact() -> None:
    assert all(f.label != "Trace" for f in _diagnosis(_run(""), None).facts)
