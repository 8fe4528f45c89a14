"""A thread's public events folded into what a person reads: the transcript.

One reading of the event log for every viewer (Preview, the Threads page, the CLI). Feed
events in `seq` order to `Transcript.apply`; replays and duplicates (seq already seen) are
ignored, so a viewer can read the database and then a stream that overlaps it.

At most one item is *open* (still receiving deltas): the last one, an assistant text or
a thinking block. Everything before it is settled. `version` changes when a settled item
changes or an item settles (not when deltas only grow the open item); `status_version`
when the thread's status, active run, environment preparation, queued messages or usage
totals change. A viewer re-renders the settled list rarely and the open text often.

A message sent while the thread's run was still starting waits its turn (`sessions._queue`):
it is `queued`, shown apart, until its own run's first event puts it in the transcript, after
the answer to the message before it. A queued run cancelled by Stop ends before the run ahead
of it does: its end waits for that run's, so the transcript still reads in turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mosoo_core.sessions._queue import MAX_PENDING_MESSAGES

RUN_END_TYPES = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}
USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    def add(self, payload: Mapping[str, Any]) -> None:
        for name in USAGE_FIELDS:
            value = payload.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                setattr(self, name, getattr(self, name) + value)

    @property
    def empty(self) -> bool:
        return not any(getattr(self, name) for name in USAGE_FIELDS)


@dataclass
class TranscriptItem:
    """One block of the transcript. `kind` says which fields matter:

    - `user`, `assistant`, `thinking`: `text` (`streaming` while deltas still arrive);
      `user` also `attachments` (the names of the files the message named)
    - `tool`: `tool_call_id`, `name`, `input`, `output`, `is_error`, `duration_ms`,
      `status` running | waiting (for a permission) | done | error | interrupted;
      `server` for a call an MCP server answered (`<server>__<tool>`, from `mcp.tool_call`)
    - `mcp_status`: an MCP server the run goes without: `name` (the server), `text` (why),
      `status` failed (a server that connected adds nothing)
    - `permission`: `request_id`, `tool_call_id`, `name`, `input`,
      `status` pending | allow_once | reject_once | expired
    - `file`: `name` (the path), `status` (the change: created, modified, deleted ...)
    - `outputs`: `files` ({id, name, path} of the artifacts a run recorded)
    - `network`: `name` (host:port), `code` (the method), `status` allowed | refused |
      failed, `text` (the egress proxy's reason)
    - `run_end`: `status` completed | failed | cancelled, `code`, `text` (the error
      message), `retryable`, `usage` (the run's summed token usage)
    """

    key: str
    kind: str
    run_id: str | None = None
    text: str = ""
    streaming: bool = False
    message_id: str = ""
    tool_call_id: str = ""
    request_id: str = ""
    name: str = ""
    input: Any = None
    output: str = ""
    is_error: bool = False
    duration_ms: int | None = None
    attachments: list[str] = field(default_factory=list)
    files: list[dict[str, str]] = field(default_factory=list)
    status: str = ""
    code: str = ""
    retryable: bool = False
    usage: Usage | None = None
    server: str = ""


@dataclass
class Transcript:
    items: list[TranscriptItem] = field(default_factory=list)
    last_seq: int = 0
    version: int = 0
    status_version: int = 0
    session_status: str = "idle"
    # The run the thread is working on (from its user.message or run.started until it ends).
    active_run_id: str | None = None
    last_run_status: str = ""
    # While the active run waits for its environment's packages (`run.preparing`, before its
    # `run.started`): the build's status, queued or building; "waking" while a hibernated
    # Assistant's sandbox is built again; "" otherwise.
    preparing: str = ""
    usage: Usage = field(default_factory=Usage)
    # Messages waiting their turn, oldest first (`user` items with status `queued`).
    queued: list[TranscriptItem] = field(default_factory=list)
    _tools: dict[str, int] = field(default_factory=dict, repr=False)
    _permissions: dict[str, int] = field(default_factory=dict, repr=False)
    _run_usage: dict[str, Usage] = field(default_factory=dict, repr=False)
    _run_ends: dict[str, int] = field(default_factory=dict, repr=False)
    _messages: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _runs_with_text: set[str] = field(default_factory=set, repr=False)
    _started_runs: set[str] = field(default_factory=set, repr=False)
    _preparing_run: str | None = field(default=None, repr=False)
    # `mcp.tool_call` records whose tool card has not started yet: (run, tool name) -> server.
    _mcp_calls: dict[tuple[str | None, str], list[str]] = field(default_factory=dict, repr=False)
    # Ends of queued runs (Stop) that arrived while the run ahead of them was still active.
    _held_ends: list[tuple[str, str, str | None, Mapping[str, Any]]] = field(
        default_factory=list, repr=False
    )

    # --- reading ---------------------------------------------------------------------------

    @property
    def open_item(self) -> TranscriptItem | None:
        """The trailing assistant text or thinking block still receiving deltas."""
        if self.items and self.items[-1].streaming:
            return self.items[-1]
        return None

    @property
    def settled_items(self) -> list[TranscriptItem]:
        return [item for item in self.items if not item.streaming]

    @property
    def run_starting(self) -> bool:
        """The thread's run has not started yet, so a message sent now waits its turn (and
        there is room for one): the console's composer stays open."""
        if len(self.queued) >= MAX_PENDING_MESSAGES:
            return False
        if self.active_run_id is not None:
            return self.active_run_id not in self._started_runs
        return bool(self.queued)  # between a run's end and its successor's first event

    @property
    def pending_permissions(self) -> list[TranscriptItem]:
        return [
            item for item in self.items if item.kind == "permission" and item.status == "pending"
        ]

    # --- folding ---------------------------------------------------------------------------

    def apply_all(self, events: Iterable[Mapping[str, Any]]) -> Transcript:
        for event in events:
            self.apply(event)
        return self

    def apply(self, event: Mapping[str, Any]) -> bool:
        """Fold one public event ({seq, type, run_id, payload}); False when already seen."""
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return False
            self.last_seq = seq
        kind = str(event.get("type", ""))
        payload = event.get("payload") or {}
        if not isinstance(payload, Mapping):
            payload = {}
        run_id = event.get("run_id")
        key = str(seq) if isinstance(seq, int) else f"local-{len(self.items)}"
        if kind != "user.message" and self._queued_index(run_id) is not None:
            if kind in RUN_END_TYPES and self.active_run_id not in (None, run_id):
                self._held_ends.append((kind, key, run_id, payload))
                return True
            self._release(run_id)
        self._handle(kind, key, run_id, payload)
        self._end_held()
        return True

    def _handle(self, kind: str, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, key, run_id, payload)

    def _end_held(self) -> None:
        """The run ahead ended: the queued runs Stop cancelled behind it end now, in turn."""
        while self.active_run_id is None and self._held_ends:
            kind, key, run_id, payload = self._held_ends.pop(0)
            self._release(run_id)
            self._handle(kind, key, run_id, payload)

    def _queued_index(self, run_id: Any) -> int | None:
        if run_id is None:
            return None
        return next((i for i, item in enumerate(self.queued) if item.run_id == run_id), None)

    def _release(self, run_id: Any) -> None:
        """A queued message's turn has come: it joins the transcript, its run the active one."""
        index = self._queued_index(run_id)
        if index is None:
            return
        item = self.queued.pop(index)
        item.status = ""
        self._close_open()
        self._append(item)
        self.active_run_id = item.run_id
        self._status_changed()

    def _changed(self) -> None:
        self.version += 1

    def _status_changed(self) -> None:
        self.status_version += 1

    def _close_open(self) -> None:
        item = self.open_item
        if item is not None:
            item.streaming = False
            self._changed()

    def _append(self, item: TranscriptItem) -> int:
        self.items.append(item)
        if not item.streaming:
            self._changed()
        return len(self.items) - 1

    def _on_user_message(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        files = payload.get("attachments")
        names = (
            [str(f.get("name", "")) for f in files if isinstance(f, Mapping)]
            if isinstance(files, list)
            else []
        )
        item = TranscriptItem(
            key=key,
            kind="user",
            run_id=run_id,
            text=str(payload.get("text", "")),
            attachments=names,
        )
        if run_id and (self.queued or self.active_run_id not in (None, run_id)):
            item.status = "queued"  # sent while another run was starting: it waits its turn
            self.queued.append(item)
            self._status_changed()
            return
        self._close_open()
        self._append(item)
        if run_id:
            self.active_run_id = run_id
            self._status_changed()

    def _on_run_started(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        if run_id:
            self._started_runs.add(run_id)
            self.active_run_id = run_id
            if self._preparing_run == run_id:
                self._stop_preparing()
            self._status_changed()

    def _on_run_preparing(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        # Late or stray (the run already started or ended, another run is active): ignored.
        if not run_id or run_id in self._started_runs or run_id in self._run_ends:
            return
        if self.active_run_id not in (None, run_id):
            return
        if payload.get("stage") == "wake":
            status = "waking"  # a hibernated Assistant's sandbox is being built again
        else:
            status = "building" if payload.get("status") == "building" else "queued"
        if self.active_run_id == run_id and self.preparing == status:
            return
        self.active_run_id = run_id
        self._preparing_run = run_id
        self.preparing = status
        self._status_changed()

    def _stop_preparing(self) -> None:
        self._preparing_run = None
        self.preparing = ""

    def _on_message_started(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        self._close_open()

    def _on_message_delta(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        text = str(payload.get("text", ""))
        message_id = str(payload.get("message_id") or "")
        item = self.open_item
        if item is not None and item.kind == "assistant" and item.message_id == message_id:
            item.text += text
            return
        self._close_open()
        index = self._append(
            TranscriptItem(
                key=key,
                kind="assistant",
                run_id=run_id,
                text=text,
                streaming=True,
                message_id=message_id,
            )
        )
        if message_id:
            self._messages.setdefault(message_id, []).append(index)
        if run_id:
            self._runs_with_text.add(run_id)

    def _on_message_completed(
        self, key: str, run_id: str | None, payload: Mapping[str, Any]
    ) -> None:
        text = payload.get("text")
        message_id = str(payload.get("message_id") or "")
        open_item = self.open_item
        segments = self._messages.get(message_id, []) if message_id else []
        if not segments and open_item is not None and open_item.kind == "assistant":
            segments = [len(self.items) - 1]
        self._close_open()
        if not segments:
            if isinstance(text, str) and text:
                self._append(
                    TranscriptItem(
                        key=key, kind="assistant", run_id=run_id, text=text, message_id=message_id
                    )
                )
                if run_id:
                    self._runs_with_text.add(run_id)
            return
        # One unbroken segment: the completed text is the authoritative whole.
        if (
            len(segments) == 1
            and isinstance(text, str)
            and text
            and self.items[segments[0]].text != text
        ):
            self.items[segments[0]].text = text
            self._changed()

    def _on_thinking_delta(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        text = str(payload.get("text", ""))
        item = self.open_item
        if item is not None and item.kind == "thinking":
            item.text += text
            return
        self._close_open()
        self._append(
            TranscriptItem(key=key, kind="thinking", run_id=run_id, text=text, streaming=True)
        )

    def _on_tool_started(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        self._close_open()
        tool_call_id = str(payload.get("tool_call_id", ""))
        index = self._append(
            TranscriptItem(
                key=key,
                kind="tool",
                run_id=run_id,
                tool_call_id=tool_call_id,
                name=str(payload.get("name", "")),
                input=payload.get("input"),
                status="running",
            )
        )
        if tool_call_id:
            self._tools[tool_call_id] = index
        recorded = self._mcp_calls.get((run_id, self.items[index].name))
        if recorded:
            self.items[index].server = recorded.pop(0)

    def _on_tool_completed(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        self._close_open()
        tool_call_id = str(payload.get("tool_call_id", ""))
        index = self._tools.get(tool_call_id)
        if index is None:  # a completion without its start (should not happen): still show it
            index = self._append(
                TranscriptItem(
                    key=key, kind="tool", run_id=run_id, tool_call_id=tool_call_id, name="tool"
                )
            )
            if tool_call_id:
                self._tools[tool_call_id] = index
        item = self.items[index]
        output = payload.get("output", "")
        item.output = output if isinstance(output, str) else str(output)
        item.is_error = bool(payload.get("is_error"))
        duration = payload.get("duration_ms")
        item.duration_ms = (
            duration if isinstance(duration, int) and not isinstance(duration, bool) else None
        )
        item.status = "error" if item.is_error else "done"
        self._changed()

    def _on_confirmation_required(
        self, key: str, run_id: str | None, payload: Mapping[str, Any]
    ) -> None:
        self._close_open()
        request_id = str(payload.get("request_id", ""))
        index = self._append(
            TranscriptItem(
                key=key,
                kind="permission",
                run_id=run_id,
                request_id=request_id,
                tool_call_id=str(payload.get("tool_call_id", "")),
                name=str(payload.get("name", "")),
                input=payload.get("input"),
                status="pending",
            )
        )
        if request_id:
            self._permissions[request_id] = index
        tool = self._tool(str(payload.get("tool_call_id", "")))
        if tool is not None and tool.status == "running":
            tool.status = "waiting"

    def _on_confirmation_resolved(
        self, key: str, run_id: str | None, payload: Mapping[str, Any]
    ) -> None:
        index = self._permissions.get(str(payload.get("request_id", "")))
        if index is None:
            return
        decision = str(payload.get("decision", ""))
        permission = self.items[index]
        permission.status = decision if decision in ("allow_once", "reject_once") else "expired"
        tool = self._tool(permission.tool_call_id)
        if tool is not None and tool.status == "waiting":
            tool.status = "running"
        self._changed()

    def _tool(self, tool_call_id: str) -> TranscriptItem | None:
        index = self._tools.get(tool_call_id) if tool_call_id else None
        return self.items[index] if index is not None else None

    def _on_file_changed(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        self._close_open()
        self._append(
            TranscriptItem(
                key=key,
                kind="file",
                run_id=run_id,
                name=str(payload.get("path", "")),
                status=str(payload.get("change", "modified")),
            )
        )

    def _on_network_request(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        # Made while a tool runs: appended without closing it (the tool completes later).
        self._append(
            TranscriptItem(
                key=key,
                kind="network",
                run_id=run_id,
                name=f"{payload.get('host', '')}:{payload.get('port', '')}",
                code=str(payload.get("method", "")),
                status=str(payload.get("outcome", "")),
                text=str(payload.get("reason", "")),
            )
        )

    def _on_mcp_server_status(
        self, key: str, run_id: str | None, payload: Mapping[str, Any]
    ) -> None:
        # A server that connected is the normal case: only one the run goes without shows.
        if payload.get("status") != "failed":
            return
        self._close_open()
        self._append(
            TranscriptItem(
                key=key,
                kind="mcp_status",
                run_id=run_id,
                name=str(payload.get("server", "")),
                text=str(payload.get("reason", "")),
                status="failed",
            )
        )

    def _on_mcp_tool_call(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        """Control's record of a call it forwarded marks the tool card of the model's call
        (`<server>__<tool>`) as answered by that server; the outcome is the card's own. It
        goes to the run's latest such card not marked yet (calls of one tool in parallel
        all name the same server), or, recorded before its card started, waits for it."""
        server = str(payload.get("server", ""))
        if not server:
            return
        name = f"{server}__{payload.get('tool', '')}"
        for item in reversed(self.items):
            unmarked = item.kind == "tool" and not item.server
            if unmarked and item.run_id == run_id and item.name == name:
                item.server = server
                self._changed()
                return
        self._mcp_calls.setdefault((run_id, name), []).append(server)

    def _on_session_files(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        listed = payload.get("files")
        found = [
            {
                "id": str(f.get("id", "")),
                "name": str(f.get("name", "")),
                "path": str(f.get("path", "")),
            }
            for f in (listed if isinstance(listed, list) else [])
            if isinstance(f, Mapping) and f.get("id")
        ]
        if found:
            self._close_open()
            self._append(TranscriptItem(key=key, kind="outputs", run_id=run_id, files=found))

    def _on_usage(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        self.usage.add(payload)
        if run_id:
            self._run_usage.setdefault(run_id, Usage()).add(payload)
            end = self._run_ends.get(run_id)
            if end is not None:  # usage reported after the run ended: update its line
                self.items[end].usage = self._run_usage[run_id]
                self._changed()
        self._status_changed()

    def _on_run_end(
        self, key: str, run_id: str | None, payload: Mapping[str, Any], status: str
    ) -> None:
        self._close_open()
        if run_id and status == "completed" and run_id not in self._runs_with_text:
            final_text = payload.get("final_text")
            if isinstance(final_text, str) and final_text:
                self._append(
                    TranscriptItem(
                        key=f"{key}-final", kind="assistant", run_id=run_id, text=final_text
                    )
                )
                self._runs_with_text.add(run_id)
        for item in self.items:
            if run_id is not None and item.run_id != run_id:
                continue
            if item.kind == "tool" and item.status in ("running", "waiting"):
                item.status = "interrupted"
            elif item.kind == "permission" and item.status == "pending":
                item.status = "expired"
        end = TranscriptItem(
            key=key,
            kind="run_end",
            run_id=run_id,
            status=status,
            usage=self._run_usage.get(run_id) if run_id else None,
        )
        if status == "failed":
            end.code = str(payload.get("code") or "run_failed")
            end.text = str(payload.get("message") or "")
            end.retryable = bool(payload.get("retryable"))
        index = self._append(end)
        if run_id:
            self._run_ends[run_id] = index
        if self.active_run_id == run_id or run_id is None:
            self.active_run_id = None
        if self._preparing_run == run_id or run_id is None:
            self._stop_preparing()
        self.last_run_status = status
        self._status_changed()

    def _on_session_status(self, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        status = payload.get("status")
        if isinstance(status, str) and status:
            self.session_status = status
            self._status_changed()
        if status == "idle" and (self.queued or self._held_ends):
            # Nothing waits on an idle thread (a run ended without its event?): show it all.
            self.active_run_id = None
            self._end_held()
            while self.queued:
                self._release(self.queued[0].run_id)
            self.active_run_id = None


def _run_end(status: str) -> Any:
    def handler(self: Transcript, key: str, run_id: str | None, payload: Mapping[str, Any]) -> None:
        self._on_run_end(key, run_id, payload, status)

    return handler


_HANDLERS: dict[str, Any] = {
    "user.message": Transcript._on_user_message,
    "run.started": Transcript._on_run_started,
    "run.preparing": Transcript._on_run_preparing,
    "agent.message.started": Transcript._on_message_started,
    "agent.message.delta": Transcript._on_message_delta,
    "agent.message.completed": Transcript._on_message_completed,
    "agent.thinking.delta": Transcript._on_thinking_delta,
    "tool.use.started": Transcript._on_tool_started,
    "tool.use.completed": Transcript._on_tool_completed,
    "tool.confirmation.required": Transcript._on_confirmation_required,
    "tool.confirmation.resolved": Transcript._on_confirmation_resolved,
    "file.changed": Transcript._on_file_changed,
    "session_files.updated": Transcript._on_session_files,
    "network.request": Transcript._on_network_request,
    "mcp.server.status": Transcript._on_mcp_server_status,
    "mcp.tool_call": Transcript._on_mcp_tool_call,
    "usage.updated": Transcript._on_usage,
    "session.status": Transcript._on_session_status,
    **{event_type: _run_end(status) for event_type, status in RUN_END_TYPES.items()},
}


def build_transcript(events: Iterable[Mapping[str, Any]]) -> Transcript:
    """The transcript of a whole event list (public shape, in seq order)."""
    return Transcript().apply_all(events)
