"""Chat display rows (`ChatItem`) built from `mosoo_core.sessions.transcript` items: texts
truncated and formatted once, in the state, so components only render them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mosoo_core.sessions.transcript import TranscriptItem, Usage

OUTPUT_DISPLAY_CHARS = 6_000
INPUT_DISPLAY_CHARS = 4_000
SUMMARY_CHARS = 140
_SUMMARY_KEYS = ("command", "path", "file_path", "pattern", "url", "query")


@dataclass
class ChatItem:
    """One transcript row, ready to render (texts already truncated and formatted)."""

    key: str = ""
    kind: str = ""
    text: str = ""
    status: str = ""
    name: str = ""
    summary: str = ""
    input_text: str = ""
    output_text: str = ""
    output_note: str = ""
    is_error: bool = False
    duration_text: str = ""
    request_id: str = ""
    code: str = ""
    retryable: bool = False
    usage_text: str = ""
    attachments: list[str] = field(default_factory=list)
    files: list[dict[str, str]] = field(default_factory=list)
    server: str = ""  # a tool call an MCP server answered: its name


def _clip(text: str, limit: int) -> tuple[str, str]:
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"… {len(text) - limit:,} more characters not shown"


def _json(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        return str(value)


def tool_summary(value: Any) -> str:
    """The one line that says what a tool call does: the command, the path, the pattern."""
    text = ""
    if isinstance(value, dict):
        for key in _SUMMARY_KEYS:
            if isinstance(value.get(key), str) and value[key].strip():
                text = value[key]
                break
        else:
            text = next((v for v in value.values() if isinstance(v, str) and v.strip()), "")
    elif isinstance(value, str):
        text = value
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def duration_text(duration_ms: int | None) -> str:
    if duration_ms is None:
        return ""
    if duration_ms < 1000:
        return f"{duration_ms} ms"
    seconds = duration_ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


def usage_text(usage: Usage | None) -> str:
    if usage is None or usage.empty:
        return ""
    parts = [f"{usage.input_tokens:,} in", f"{usage.output_tokens:,} out"]
    extras = []
    if usage.cached_input_tokens:
        extras.append(f"{usage.cached_input_tokens:,} cached")
    if usage.reasoning_tokens:
        extras.append(f"{usage.reasoning_tokens:,} reasoning")
    text = " · ".join(parts) + " tokens"
    return f"{text} ({', '.join(extras)})" if extras else text


def chat_item(item: TranscriptItem) -> ChatItem:
    """A transcript item as a display row."""
    row = ChatItem(
        key=item.key,
        kind=item.kind,
        text=item.text,
        status=item.status,
        name=item.name,
        attachments=list(item.attachments),
        files=[dict(f) for f in item.files],
    )
    if item.kind in ("tool", "permission"):
        row.summary = tool_summary(item.input)
        row.input_text, _ = _clip(_json(item.input), INPUT_DISPLAY_CHARS)
        row.request_id = item.request_id
    if item.kind == "tool":
        row.output_text, row.output_note = _clip(item.output, OUTPUT_DISPLAY_CHARS)
        row.is_error = item.is_error
        row.duration_text = duration_text(item.duration_ms)
        row.server = item.server
    if item.kind == "network":
        row.code = item.code  # the method
    if item.kind == "run_end":
        row.code = item.code
        row.retryable = item.retryable
        row.usage_text = usage_text(item.usage)
    return row
