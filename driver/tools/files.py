"""`read`, `write` and `edit`: files in (or outside) the workspace, UTF-8 text."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from driver.tools.base import (
    Tool,
    ToolContext,
    ToolResult,
    optional_bool,
    optional_int,
    require_str,
)

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_READ_CHARS = 28_000
_BINARY_SNIFF_BYTES = 8192


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:_BINARY_SNIFF_BYTES]


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if _is_binary(data):
        raise ValueError(f"{path} is a binary file ({len(data)} bytes)")
    return data.decode("utf-8", errors="replace")


def _write_text(path: Path, content: str) -> None:
    """Write through a temporary file in the same folder, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else None
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
        if mode is not None:
            os.chmod(temporary, mode)
        else:
            os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


class ReadTool(Tool):
    name = "read"
    description = (
        "Read a text file. Returns its lines prefixed with their line number and a tab "
        f"(`     1\\tfirst line`); the numbers are not part of the file. Reads at most `limit` lines "
        f"(default {DEFAULT_READ_LINES}) starting at line `offset` (1-based, default 1). "
        "Relative paths are resolved against the workspace."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, absolute or relative to the workspace.",
            },
            "offset": {"type": "integer", "description": "First line to read (1-based)."},
            "limit": {"type": "integer", "description": "Number of lines to read."},
        },
        "required": ["path"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        path = context.resolve(require_str(arguments, "path"))
        offset = optional_int(arguments, "offset", minimum=1) or 1
        limit = optional_int(arguments, "limit", minimum=1) or DEFAULT_READ_LINES
        return await asyncio.to_thread(self._read, path, offset, limit, context)

    def _read(self, path: Path, offset: int, limit: int, context: ToolContext) -> ToolResult:
        if path.is_dir():
            return ToolResult(
                f"{context.display(path)} is a directory; use glob to list files", is_error=True
            )
        if not path.exists():
            return ToolResult(f"file not found: {context.display(path)}", is_error=True)
        try:
            text = _read_text(path)
        except ValueError as error:
            return ToolResult(str(error), is_error=True)
        lines = text.splitlines()
        if not lines:
            return ToolResult(f"({context.display(path)} is empty)")
        if offset > len(lines):
            return ToolResult(
                f"offset {offset} is past the end of {context.display(path)} ({len(lines)} lines)",
                is_error=True,
            )
        out: list[str] = []
        size = 0
        last = offset - 1
        for number in range(offset, min(len(lines), offset + limit - 1) + 1):
            line = lines[number - 1]
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... line truncated, {len(line)} characters]"
            entry = f"{number:>6}\t{line}"
            if out and size + len(entry) + 1 > MAX_READ_CHARS:
                break
            out.append(entry)
            size += len(entry) + 1
            last = number
        if last < len(lines):
            out.append(f"[... {len(lines) - last} more lines; read again with offset={last + 1}]")
        return ToolResult("\n".join(out))


class WriteTool(Tool):
    name = "write"
    description = (
        "Create or overwrite a text file with `content` (UTF-8). Missing parent directories are "
        "created. Relative paths are resolved against the workspace."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, absolute or relative to the workspace.",
            },
            "content": {"type": "string", "description": "The full new content of the file."},
        },
        "required": ["path", "content"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        path = context.resolve(require_str(arguments, "path"))
        content = require_str(arguments, "content", allow_empty=True)
        if path.is_dir():
            return ToolResult(f"{context.display(path)} is a directory", is_error=True)
        existed = path.exists()
        await asyncio.to_thread(_write_text, path, content)
        size = len(content.encode("utf-8"))
        shown = context.display(path)
        return ToolResult(
            f"{'Overwrote' if existed else 'Created'} {shown} ({size} bytes)",
            changed_files=[(shown, "modified" if existed else "created")],
        )


class EditTool(Tool):
    name = "edit"
    description = (
        "Replace an exact string in a text file. `old_string` must occur exactly once unless "
        "`replace_all` is true; include enough surrounding lines to make it unique. Whitespace "
        "and indentation must match exactly (do not include the line-number prefix of `read`)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, absolute or relative to the workspace.",
            },
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The replacement text."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence (default false).",
            },
        },
        "required": ["path", "old_string", "new_string"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        path = context.resolve(require_str(arguments, "path"))
        old = require_str(arguments, "old_string")
        new = require_str(arguments, "new_string", allow_empty=True)
        replace_all = optional_bool(arguments, "replace_all")
        return await asyncio.to_thread(self._edit, path, old, new, replace_all, context)

    def _edit(
        self, path: Path, old: str, new: str, replace_all: bool, context: ToolContext
    ) -> ToolResult:
        shown = context.display(path)
        if old == new:
            return ToolResult(
                "old_string and new_string are identical; nothing to do", is_error=True
            )
        if path.is_dir():
            return ToolResult(f"{shown} is a directory", is_error=True)
        if not path.exists():
            return ToolResult(
                f"file not found: {shown} (use write to create a file)", is_error=True
            )
        try:
            text = _read_text(path)
        except ValueError as error:
            return ToolResult(str(error), is_error=True)
        count = text.count(old)
        if count == 0:
            return ToolResult(f"old_string was not found in {shown}", is_error=True)
        if count > 1 and not replace_all:
            return ToolResult(
                f"old_string occurs {count} times in {shown}; add surrounding context to make it "
                "unique, or set replace_all to true",
                is_error=True,
            )
        _write_text(path, text.replace(old, new) if replace_all else text.replace(old, new, 1))
        replaced = count if replace_all else 1
        return ToolResult(
            f"Replaced {replaced} occurrence{'s' if replaced != 1 else ''} in {shown}",
            changed_files=[(shown, "modified")],
        )
