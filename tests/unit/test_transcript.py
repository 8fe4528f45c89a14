"""The transcript reducer: public events in seq order -> what a person reads."""

from __future__ import annotations

from typing import Any

from mosoo_core.sessions.transcript import Transcript, build_transcript

RUN = "run_1"


class Log:
    """Events with consecutive seqs, the way the event log hands them out."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, type_: str, run_id: str | None = RUN, **payload: Any) -> dict[str, Any]:
        event = {"seq": len(self.events) + 1, "type": type_, "run_id": run_id, "payload": payload}
        self.events.append(event)
        return event


def _kinds(transcript: Transcript) -> list[str]:
    return [item.kind for item in transcript.items]


def test_items_follow_the_event_order() -> None:
    log = Log()
    log.add("user.message", text="list files")
    log.add("session.status", run_id=None, status="running")
    log.add("run.started")
    log.add("agent.thinking.delta", text="I should run ls")
    log.add("agent.message.started", message_id="m1")
    log.add("agent.message.delta", message_id="m1", text="Sure.")
    log.add("agent.message.completed", message_id="m1", text="Sure.")
    log.add("tool.use.started", tool_call_id="c1", name="bash", input={"command": "ls"})
    log.add("tool.use.completed", tool_call_id="c1", output="a.txt", is_error=False, duration_ms=12)
    log.add("file.changed", path="/workspace/a.txt", change="created")
    log.add("agent.message.delta", message_id="m2", text="Done.")
    log.add("run.completed", final_text="Done.")
    log.add("session.status", run_id=None, status="idle")

    transcript = build_transcript(log.events)

    assert _kinds(transcript) == [
        "user",
        "thinking",
        "assistant",
        "tool",
        "file",
        "assistant",
        "run_end",
    ]
    assert [item.text for item in transcript.items if item.kind in ("user", "assistant")] == [
        "list files",
        "Sure.",
        "Done.",
    ]
    assert transcript.open_item is None
    assert transcript.last_seq == 13
    assert transcript.session_status == "idle"
    assert transcript.active_run_id is None and transcript.last_run_status == "completed"


def test_deltas_concatenate_into_one_open_item_until_something_else_happens() -> None:
    log = Log()
    log.add("user.message", text="hi")
    transcript = build_transcript(log.events)
    settled_version = transcript.version

    for piece in ["Hel", "lo, ", "world"]:
        transcript.apply(log.add("agent.message.delta", message_id="m1", text=piece))

    assert transcript.open_item is not None
    assert transcript.open_item.text == "Hello, world"
    assert transcript.open_item.streaming
    # Growing the open text does not touch the settled items.
    assert transcript.version == settled_version
    assert [item.kind for item in transcript.settled_items] == ["user"]

    transcript.apply(log.add("agent.message.completed", message_id="m1", text="Hello, world"))
    assert transcript.open_item is None
    assert transcript.version > settled_version
    assert transcript.items[-1].text == "Hello, world"


def test_thinking_deltas_concatenate_and_close_when_text_starts() -> None:
    log = Log()
    log.add("agent.thinking.delta", text="Let me ")
    log.add("agent.thinking.delta", text="think.")
    log.add("agent.message.delta", message_id="m1", text="Answer")
    transcript = build_transcript(log.events)
    thinking, answer = transcript.items
    assert (thinking.kind, thinking.text, thinking.streaming) == (
        "thinking",
        "Let me think.",
        False,
    )
    assert (answer.kind, answer.text, answer.streaming) == ("assistant", "Answer", True)


def test_completed_text_is_authoritative_and_stands_in_for_missing_deltas() -> None:
    log = Log()
    log.add("agent.message.delta", message_id="m1", text="Hel")
    log.add("agent.message.completed", message_id="m1", text="Hello")
    log.add("agent.message.completed", message_id="m2", text="Without deltas")
    transcript = build_transcript(log.events)
    assert [item.text for item in transcript.items] == ["Hello", "Without deltas"]


def test_final_text_is_shown_when_the_run_streamed_no_text() -> None:
    log = Log()
    log.add("user.message", text="q")
    log.add("run.completed", final_text="the answer")
    transcript = build_transcript(log.events)
    assert _kinds(transcript) == ["user", "assistant", "run_end"]
    assert transcript.items[1].text == "the answer"


def test_tool_start_and_complete_pair_by_tool_call_id() -> None:
    log = Log()
    log.add("tool.use.started", tool_call_id="c1", name="bash", input={"command": "ls"})
    log.add("tool.use.started", tool_call_id="c2", name="read", input={"path": "x"})
    transcript = build_transcript(log.events)
    assert [item.status for item in transcript.items] == ["running", "running"]

    transcript.apply(
        log.add(
            "tool.use.completed",
            tool_call_id="c2",
            output="no such file",
            is_error=True,
            duration_ms=3,
        )
    )
    transcript.apply(
        log.add(
            "tool.use.completed", tool_call_id="c1", output="a\nb", is_error=False, duration_ms=40
        )
    )

    first, second = transcript.items
    assert (first.name, first.input, first.output, first.status, first.duration_ms) == (
        "bash",
        {"command": "ls"},
        "a\nb",
        "done",
        40,
    )
    assert (second.name, second.output, second.is_error, second.status, second.duration_ms) == (
        "read",
        "no such file",
        True,
        "error",
        3,
    )
    assert len(transcript.items) == 2


def test_tools_still_running_when_the_run_stops_are_interrupted() -> None:
    log = Log()
    log.add("tool.use.started", tool_call_id="c1", name="bash", input={"command": "sleep 100"})
    log.add("run.cancelled", reason="user")
    transcript = build_transcript(log.events)
    assert transcript.items[0].status == "interrupted"
    assert transcript.items[-1].kind == "run_end" and transcript.items[-1].status == "cancelled"
    assert transcript.last_run_status == "cancelled"


def test_permission_required_then_resolved() -> None:
    log = Log()
    log.add("user.message", text="delete it")
    log.add("tool.use.started", tool_call_id="c1", name="bash", input={"command": "rm x"})
    log.add(
        "tool.confirmation.required",
        request_id="p1",
        tool_call_id="c1",
        name="bash",
        input={"command": "rm x"},
    )
    transcript = build_transcript(log.events)

    [pending] = transcript.pending_permissions
    assert (pending.request_id, pending.tool_call_id, pending.name, pending.input) == (
        "p1",
        "c1",
        "bash",
        {"command": "rm x"},
    )
    assert pending.status == "pending"
    assert transcript.active_run_id == RUN

    transcript.apply(log.add("tool.confirmation.resolved", request_id="p1", decision="reject_once"))
    assert transcript.pending_permissions == []
    assert transcript.items[-1].status == "reject_once"


def test_a_pending_permission_expires_when_its_run_ends() -> None:
    log = Log()
    log.add("tool.confirmation.required", request_id="p1", tool_call_id="c1", name="bash", input={})
    log.add("run.failed", code="driver_lost", message="gone", retryable=True)
    transcript = build_transcript(log.events)
    assert transcript.items[0].status == "expired"
    assert transcript.pending_permissions == []


def test_run_failed_carries_its_error() -> None:
    log = Log()
    log.add("user.message", text="hi")
    log.add("run.started")
    log.add("agent.message.delta", message_id="m1", text="Partial")
    log.add(
        "run.failed", code="provider_error", message="The provider answered 401.", retryable=False
    )
    transcript = build_transcript(log.events)
    end = transcript.items[-1]
    assert (end.kind, end.status, end.code, end.text, end.retryable) == (
        "run_end",
        "failed",
        "provider_error",
        "The provider answered 401.",
        False,
    )
    # The partial text stays, settled.
    assert transcript.items[1].text == "Partial" and not transcript.items[1].streaming
    assert transcript.active_run_id is None and transcript.last_run_status == "failed"


def test_usage_sums_per_run_and_per_thread() -> None:
    log = Log()
    log.add("usage.updated", input_tokens=100, output_tokens=20, cached_input_tokens=50, model="m")
    log.add("usage.updated", input_tokens=150, output_tokens=30, reasoning_tokens=7, model="m")
    log.add("run.completed", final_text="")
    log.add("usage.updated", run_id="run_2", input_tokens=10, output_tokens=1)
    transcript = build_transcript(log.events)

    run_end = transcript.items[0]
    assert run_end.kind == "run_end" and run_end.usage is not None
    assert (run_end.usage.input_tokens, run_end.usage.output_tokens) == (250, 50)
    assert (run_end.usage.cached_input_tokens, run_end.usage.reasoning_tokens) == (50, 7)
    assert (transcript.usage.input_tokens, transcript.usage.output_tokens) == (260, 51)


def test_usage_reported_after_the_run_ended_updates_its_line() -> None:
    log = Log()
    log.add("run.completed", final_text="")
    log.add("usage.updated", input_tokens=5, output_tokens=2)
    transcript = build_transcript(log.events)
    assert transcript.items[0].usage is not None
    assert transcript.items[0].usage.input_tokens == 5


def test_unknown_event_types_are_ignored_but_advance_the_seq() -> None:
    log = Log()
    log.add("user.message", text="hi")
    log.add("session_files.updated", files=[])
    log.add("something.new", whatever=True)
    transcript = build_transcript(log.events)
    assert _kinds(transcript) == ["user"]
    assert transcript.last_seq == 3


def test_replayed_events_are_ignored() -> None:
    log = Log()
    log.add("user.message", text="hi")
    log.add("agent.message.delta", message_id="m1", text="abc")
    transcript = build_transcript(log.events)
    # The database read and the stream overlap: the same seqs again change nothing.
    assert transcript.apply(log.events[1]) is False
    transcript.apply_all(log.events)
    assert transcript.items[-1].text == "abc"
    assert len(transcript.items) == 2


def test_a_tool_waits_while_its_permission_is_pending() -> None:
    log = Log()
    log.add("tool.use.started", tool_call_id="c1", name="bash", input={"command": "rm x"})
    log.add("tool.confirmation.required", request_id="p1", tool_call_id="c1", name="bash", input={})
    transcript = build_transcript(log.events)
    assert transcript.items[0].status == "waiting"
    transcript.apply(log.add("tool.confirmation.resolved", request_id="p1", decision="allow_once"))
    assert transcript.items[0].status == "running"


def test_status_and_usage_changes_leave_the_settled_items_alone() -> None:
    log = Log()
    log.add("user.message", text="hi")
    transcript = build_transcript(log.events)
    version, status_version = transcript.version, transcript.status_version
    transcript.apply(log.add("run.started"))
    transcript.apply(log.add("session.status", run_id=None, status="running"))
    transcript.apply(log.add("usage.updated", input_tokens=3, output_tokens=1))
    assert transcript.version == version
    assert transcript.status_version > status_version
    assert transcript.session_status == "running" and transcript.usage.input_tokens == 3


def test_a_user_message_carries_the_names_of_the_files_it_named() -> None:
    log = Log()
    log.add(
        "user.message",
        text="summarise",
        attachments=[
            {"file_id": "f1", "name": "notes.txt", "media_type": "text/plain", "size": 3},
            {"file_id": "f2", "name": "data.csv", "media_type": "text/csv", "size": 9},
            "not a file entry",
        ],
    )
    log.add("user.message", text="and this?")
    transcript = build_transcript(log.events)
    assert [item.attachments for item in transcript.items] == [["notes.txt", "data.csv"], []]


def test_recorded_outputs_become_one_line_after_the_run() -> None:
    log = Log()
    log.add("user.message", text="write it")
    log.add("run.completed", final_text="done")
    log.add(
        "session_files.updated",
        files=[
            {"id": "f1", "name": "summary.md", "path": "summary.md", "kind": "artifact"},
            {"name": "no id, not a file"},
        ],
    )
    log.add("session_files.updated", files=[])  # nothing recorded: no line
    transcript = build_transcript(log.events)
    assert _kinds(transcript)[-1] == "outputs"
    assert transcript.items[-1].files == [{"id": "f1", "name": "summary.md", "path": "summary.md"}]
    assert _kinds(transcript).count("outputs") == 1


def test_egress_decisions_are_lines_and_leave_the_running_tool_open() -> None:
    log = Log()
    log.add("tool.use.started", tool_call_id="c1", name="web_fetch", input={"url": "https://x"})
    log.add(
        "network.request",
        host="evil.example",
        port=443,
        method="CONNECT",
        outcome="refused",
        reason="not_allowed",
    )
    log.add("tool.use.completed", tool_call_id="c1", output="refused", is_error=True)

    transcript = build_transcript(log.events)

    tool, network = transcript.items
    assert (tool.kind, tool.status) == ("tool", "error")  # completed after the decision
    assert (network.kind, network.name, network.code, network.status, network.text) == (
        "network",
        "evil.example:443",
        "CONNECT",
        "refused",
        "not_allowed",
    )


def test_a_run_waiting_for_its_environment_shows_preparing_until_it_starts() -> None:
    log = Log()
    transcript = build_transcript([log.add("user.message", text="plot it")])
    assert transcript.preparing == ""

    before = transcript.status_version
    transcript.apply(log.add("run.preparing", stage="environment", status="queued"))
    assert transcript.preparing == "queued"
    assert transcript.active_run_id == RUN
    assert transcript.status_version > before

    transcript.apply(log.add("run.preparing", stage="environment", status="building"))
    assert transcript.preparing == "building"
    # The same status again changes nothing a viewer must re-render.
    before = transcript.status_version
    transcript.apply(log.add("run.preparing", stage="environment", status="building"))
    assert transcript.status_version == before

    transcript.apply(log.add("run.started"))
    assert transcript.preparing == ""
    assert transcript.active_run_id == RUN
    # A late preparing event of a run that started is not shown again.
    transcript.apply(log.add("run.preparing", stage="environment", status="building"))
    assert transcript.preparing == ""
    assert _kinds(transcript) == ["user"]  # a status, never an item


def test_preparing_ends_with_a_run_whose_build_failed() -> None:
    log = Log()
    log.add("user.message", text="plot it")
    log.add("run.preparing", stage="environment", status="building")
    log.add(
        "run.failed",
        code="environment_build_failed",
        message="Installing the packages failed.\nERROR: No matching distribution",
    )
    transcript = build_transcript(log.events)

    assert transcript.preparing == ""
    assert transcript.active_run_id is None
    end = transcript.items[-1]
    assert (end.kind, end.code) == ("run_end", "environment_build_failed")
    assert "No matching distribution" in end.text
    # A replay of the whole log reads the same.
    assert build_transcript(log.events).preparing == ""


def test_preparing_of_another_run_than_the_active_one_is_ignored() -> None:
    log = Log()
    log.add("user.message", text="first")
    log.add("run.started")
    log.add("run.preparing", run_id="run_other", stage="environment", status="queued")
    transcript = build_transcript(log.events)

    assert transcript.preparing == ""
    assert transcript.active_run_id == RUN


def test_an_mcp_server_the_run_goes_without_is_a_line_and_a_connected_one_adds_nothing() -> None:
    log = Log()
    log.add("user.message", text="weather?")
    log.add("run.started")
    log.add("mcp.server.status", server="tools", status="connected", tools=6, required=False)
    log.add(
        "mcp.server.status",
        server="weather",
        status="failed",
        reason="The server could not be reached.",
        required=False,
    )
    log.add("agent.message.delta", message_id="m1", text="Without weather, then.")
    log.add("run.completed")

    transcript = build_transcript(log.events)

    assert _kinds(transcript) == ["user", "mcp_status", "assistant", "run_end"]
    line = transcript.items[1]
    assert (line.name, line.status, line.text) == (
        "weather",
        "failed",
        "The server could not be reached.",
    )


def test_an_mcp_tool_call_record_marks_its_tool_card_and_adds_no_item() -> None:
    log = Log()
    log.add("tool.use.started", tool_call_id="c1", name="tools__echo", input={"text": "hi"})
    log.add("tool.use.started", tool_call_id="c2", name="bash", input={"command": "ls"})
    log.add("tool.use.completed", tool_call_id="c1", output="echo: hi", duration_ms=40)
    transcript = build_transcript(log.events)
    before = transcript.version

    transcript.apply(
        log.add("mcp.tool_call", server_id="S1", server="tools", tool="echo", outcome="ok")
    )

    echo, bash = transcript.items
    assert _kinds(transcript) == ["tool", "tool"]
    assert (echo.server, echo.status, echo.output) == ("tools", "done", "echo: hi")
    assert bash.server == ""
    assert transcript.version > before  # a settled card changed: viewers re-render


def test_an_mcp_tool_call_recorded_before_its_card_started_waits_for_it() -> None:
    log = Log()
    log.add("tool.use.started", tool_call_id="c1", name="tools__echo", input={"text": "1"})
    log.add("mcp.tool_call", server="tools", tool="echo", outcome="ok")
    # The second call's record reaches the log before the driver's start of its card.
    log.add("mcp.tool_call", server="tools", tool="echo", outcome="error")
    log.add("tool.use.started", tool_call_id="c2", name="tools__echo", input={"text": "2"})
    log.add("tool.use.completed", tool_call_id="c2", output="boom", is_error=True)
    # Another run's card of the same tool is not marked by this run's records.
    log.add("tool.use.started", run_id="run_2", tool_call_id="c3", name="tools__echo")

    transcript = build_transcript(log.events)

    assert [(item.tool_call_id, item.server, item.status) for item in transcript.items] == [
        ("c1", "tools", "running"),
        ("c2", "tools", "error"),
        ("c3", "", "running"),
    ]
