"""What every built-in tool shares: the result shape, the context, input checks, paths."""

from __future__ import annotations

import abc
import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

log = logging.getLogger("driver.tools")

# Tool output handed to the model (and put in events) never exceeds this many characters.
MAX_TOOL_OUTPUT_CHARS = 30_000


@dataclass
class ToolResult:
    output: str
    is_error: bool = False
    # (path, "created" | "modified"), for `file.changed` events.
    changed_files: list[tuple[str, str]] = field(default_factory=list)
    # More of the tool card's `tool.call.completed` payload (an MCP tool's content blocks and
    # structured content), and images the model is shown after the step (data URLs).
    details: dict[str, Any] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)


@dataclass
class ToolContext:
    workspace: Path
    environment: dict[str, str] = field(default_factory=dict)

    def resolve(self, raw: str) -> Path:
        """Relative paths resolve against the workspace; `~` expands; no other restriction
        (the sandbox is the isolation boundary, and attachments live outside the workspace)."""
        path = Path(os.path.expanduser(raw))
        if not path.is_absolute():
            path = self.workspace / path
        return Path(os.path.normpath(path))

    def display(self, path: Path) -> str:
        """A path as shown to the model: relative to the workspace when inside it."""
        try:
            relative = path.relative_to(self.workspace)
        except ValueError:
            return str(path)
        return str(relative) if str(relative) != "." else "."


class ToolInputError(ValueError):
    """The model called a tool with missing or ill-typed arguments."""


def require_str(data: dict[str, Any], key: str, *, allow_empty: bool = False) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ToolInputError(f"`{key}` is required and must be a string")
    if not allow_empty and not value:
        raise ToolInputError(f"`{key}` must not be empty")
    return value


def optional_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolInputError(f"`{key}` must be a string")
    return value


def optional_int(
    data: dict[str, Any], key: str, *, minimum: int, maximum: int | None = None
) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolInputError(f"`{key}` must be an integer")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and {maximum}" if maximum is not None else ""
        raise ToolInputError(
            f"`{key}` must be between {minimum}{upper}"
            if upper
            else f"`{key}` must be at least {minimum}"
        )
    return value


def optional_bool(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ToolInputError(f"`{key}` must be true or false")
    return value


def cap_output(text: str, limit: int = MAX_TOOL_OUTPUT_CHARS) -> str:
    """Keep the head and the tail of a long output and say how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return (
        f"{text[:half]}\n\n[... output truncated: {cut} characters omitted ...]\n\n{text[-half:]}"
    )


class Tool(abc.ABC):
    """A built-in tool: a name, a description and a JSON schema for the model, and `execute`."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]
    # `run` cuts a longer output (its middle); a tool that bounds its own output may raise it.
    max_output_chars: ClassVar[int] = MAX_TOOL_OUTPUT_CHARS

    def schema(self) -> dict[str, Any]:
        """The Chat Completions `tools[]` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    @abc.abstractmethod
    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """Carry out the call; raise ToolInputError for bad arguments."""

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """`execute` with every failure turned into an error result; only cancellation escapes."""
        if not isinstance(arguments, dict):
            return ToolResult("tool arguments must be a JSON object", is_error=True)
        try:
            result = await self.execute(arguments, context)
        except asyncio.CancelledError:
            raise
        except ToolInputError as error:
            return ToolResult(f"invalid input for {self.name}: {error}", is_error=True)
        except FileNotFoundError as error:
            return ToolResult(f"no such file or directory: {error.filename}", is_error=True)
        except IsADirectoryError as error:
            return ToolResult(f"is a directory: {error.filename}", is_error=True)
        except NotADirectoryError as error:
            return ToolResult(f"not a directory: {error.filename}", is_error=True)
        except PermissionError as error:
            return ToolResult(f"permission denied: {error.filename}", is_error=True)
        except OSError as error:
            return ToolResult(f"{self.name} failed: {error}", is_error=True)
        except Exception as error:  # a tool bug must never take the driver down
            log.exception("tool_crashed", extra={"tool": self.name})
            return ToolResult(
                f"{self.name} failed unexpectedly: {type(error).__name__}: {error}", is_error=True
            )
        result.output = cap_output(result.output, self.max_output_chars)
        return result
