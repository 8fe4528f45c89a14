"""`bash`: run a command with `bash -lc` in the workspace, in its own process group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from driver.tools.base import (
    MAX_TOOL_OUTPUT_CHARS,
    Tool,
    ToolContext,
    ToolResult,
    optional_int,
    require_str,
)

DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 600
# After the command exits, background jobs may still hold its stdout open; wait this long.
OUTPUT_DRAIN_SECONDS = 1.0
_READ_CHUNK = 65536


class _OutputBuffer:
    """Keeps the first and the last bytes of an output of any size."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def text(self) -> str:
        if self.total <= len(self.head) + len(self.tail):
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        head = bytes(self.head).decode("utf-8", errors="replace")
        tail = bytes(self.tail).decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n\n[... output truncated: {omitted} bytes omitted ...]\n\n{tail}"


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def command_environment(extra: dict[str, str]) -> dict[str, str]:
    """The driver's environment minus its own variables, plus the execution spec's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOSOO_DRIVER_")}
    env.update({"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"})
    env.update(extra)
    return env


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a shell command with `bash -lc` in the workspace directory and return its combined "
        f"stdout and stderr (at most {MAX_TOOL_OUTPUT_CHARS} characters; the middle of a longer "
        f"output is cut). Times out after `timeout_seconds` (default {DEFAULT_TIMEOUT_SECONDS}, "
        f"max {MAX_TIMEOUT_SECONDS}). Non-interactive: no stdin."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run."},
            "timeout_seconds": {
                "type": "integer",
                "description": f"Kill the command after this many seconds (1-{MAX_TIMEOUT_SECONDS}).",
            },
        },
        "required": ["command"],
    }

    def __init__(self, default_timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.default_timeout = default_timeout

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        command = require_str(arguments, "command")
        timeout = optional_int(arguments, "timeout_seconds", minimum=1, maximum=MAX_TIMEOUT_SECONDS)
        limit = float(timeout) if timeout is not None else self.default_timeout
        if not context.workspace.is_dir():
            return ToolResult(f"the workspace {context.workspace} does not exist", is_error=True)

        process = await asyncio.create_subprocess_exec(
            "bash",
            "-lc",
            command,
            cwd=context.workspace,
            env=command_environment(context.environment),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, so timeout and cancel kill it all
        )
        # Head and tail halves, leaving room for the notes within MAX_TOOL_OUTPUT_CHARS.
        buffer = _OutputBuffer(keep=(MAX_TOOL_OUTPUT_CHARS - 300) // 2)

        async def read_output() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(_READ_CHUNK):
                buffer.add(chunk)

        reader = asyncio.create_task(read_output())
        timed_out = False
        try:
            try:
                await asyncio.wait_for(process.wait(), timeout=limit)
            except TimeoutError:
                timed_out = True
                _kill_group(process)
                await process.wait()
            # Background jobs can keep the pipe open after the command itself has exited.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), timeout=OUTPUT_DRAIN_SECONDS)
        except asyncio.CancelledError:
            _kill_group(process)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(process.wait()), timeout=5)
            raise
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader

        output = buffer.text().rstrip("\n")
        exit_code = process.returncode
        notes = []
        if timed_out:
            notes.append(f"[command timed out after {limit:g} s and was killed]")
        elif exit_code:
            notes.append(f"[exit code: {exit_code}]")
        if notes:
            output = f"{output}\n{' '.join(notes)}" if output else " ".join(notes)
        elif not output:
            output = "(no output)"
        return ToolResult(output, is_error=timed_out or bool(exit_code))
