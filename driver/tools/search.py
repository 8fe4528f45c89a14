"""`glob` and `grep`: find files and lines, in pure Python (no ripgrep in the image)."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from driver.tools.base import (
    Tool,
    ToolContext,
    ToolInputError,
    ToolResult,
    optional_bool,
    optional_int,
    optional_str,
    require_str,
)

# Folders that are noise for an agent; searched only when named as `path` themselves.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".mosoo"})
MAX_GLOB_RESULTS = 500
DEFAULT_GREP_RESULTS = 200
MAX_GREP_RESULTS = 2000
MAX_GREP_FILE_BYTES = 5 * 1024 * 1024
MAX_MATCH_LINE_CHARS = 300
SEARCH_SECONDS = 30.0


def _walk_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for filename in sorted(filenames):
            yield Path(directory) / filename


def _search_root(arguments: dict[str, Any], context: ToolContext) -> Path:
    raw = optional_str(arguments, "path")
    root = context.resolve(raw) if raw else context.workspace
    if not root.exists():
        raise FileNotFoundError(2, "No such file or directory", str(root))
    return root


class GlobTool(Tool):
    name = "glob"
    description = (
        "List files whose path matches a glob pattern such as `**/*.py` or `src/*.ts`, relative to "
        f"`path` (default: the workspace). Returns at most {MAX_GLOB_RESULTS} paths, sorted. "
        f"Skips {', '.join(sorted(SKIPPED_DIRS))}."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern; `**` matches any depth."},
            "path": {
                "type": "string",
                "description": "Directory to search in (default: the workspace).",
            },
        },
        "required": ["pattern"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        pattern = require_str(arguments, "pattern")
        root = _search_root(arguments, context)
        if not root.is_dir():
            return ToolResult(f"{context.display(root)} is not a directory", is_error=True)
        if os.path.isabs(pattern):
            raise ToolInputError("`pattern` must be relative; put the directory in `path`")
        return await asyncio.to_thread(self._glob, root, pattern, context)

    def _glob(self, root: Path, pattern: str, context: ToolContext) -> ToolResult:
        matches: list[str] = []
        truncated = False
        deadline = time.monotonic() + SEARCH_SECONDS
        for path in root.glob(pattern):
            relative_parts = path.relative_to(root).parts
            if any(part in SKIPPED_DIRS for part in relative_parts[:-1]) or not path.is_file():
                continue
            if len(matches) >= MAX_GLOB_RESULTS or time.monotonic() > deadline:
                truncated = True
                break
            matches.append(context.display(path))
        if not matches:
            return ToolResult(f"no files match {pattern!r} in {context.display(root)}")
        matches.sort()
        if truncated:
            matches.append(
                f"[... more matches not shown; narrow the pattern (limit {MAX_GLOB_RESULTS})]"
            )
        return ToolResult("\n".join(matches))


class GrepTool(Tool):
    name = "grep"
    description = (
        "Search file contents with a Python regular expression. Returns `path:line: text` for each "
        "matching line. `path` is a file or directory (default: the workspace); `glob` filters file "
        "names (e.g. `*.py`, or `src/**/*.ts` against the path). Skips binary and very large files "
        f"and {', '.join(sorted(SKIPPED_DIRS))}."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Regular expression (Python `re` syntax).",
            },
            "path": {
                "type": "string",
                "description": "File or directory to search (default: the workspace).",
            },
            "glob": {"type": "string", "description": "Only search files matching this glob."},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)."},
            "max_results": {
                "type": "integer",
                "description": f"Stop after this many matching lines (default {DEFAULT_GREP_RESULTS}).",
            },
        },
        "required": ["pattern"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raw_pattern = require_str(arguments, "pattern")
        try:
            pattern = re.compile(
                raw_pattern, re.IGNORECASE if optional_bool(arguments, "case_insensitive") else 0
            )
        except re.error as error:
            return ToolResult(f"invalid regular expression {raw_pattern!r}: {error}", is_error=True)
        file_glob = optional_str(arguments, "glob")
        limit = (
            optional_int(arguments, "max_results", minimum=1, maximum=MAX_GREP_RESULTS)
            or DEFAULT_GREP_RESULTS
        )
        root = _search_root(arguments, context)
        return await asyncio.to_thread(self._grep, root, pattern, file_glob, limit, context)

    def _grep(
        self,
        root: Path,
        pattern: re.Pattern[str],
        file_glob: str | None,
        limit: int,
        context: ToolContext,
    ) -> ToolResult:
        results: list[str] = []
        files_with_matches = 0
        stopped = ""
        deadline = time.monotonic() + SEARCH_SECONDS
        for path in _walk_files(root):
            if file_glob and not _glob_matches(path, root, file_glob):
                continue
            if time.monotonic() > deadline:
                stopped = f"[search stopped after {SEARCH_SECONDS:g} s; narrow `path` or `glob`]"
                break
            try:
                if path.stat().st_size > MAX_GREP_FILE_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\x00" in data[:8192]:
                continue
            found = False
            for number, line in enumerate(
                data.decode("utf-8", errors="replace").splitlines(), start=1
            ):
                if pattern.search(line):
                    found = True
                    if len(line) > MAX_MATCH_LINE_CHARS:
                        line = line[:MAX_MATCH_LINE_CHARS] + " [...]"
                    results.append(f"{context.display(path)}:{number}: {line}")
                    if len(results) >= limit:
                        stopped = f"[stopped at {limit} matching lines; narrow the search or raise max_results]"
                        break
            files_with_matches += found
            if stopped:
                break
        if not results:
            return ToolResult(
                f"no matches for {pattern.pattern!r} in {context.display(root)}"
                + (f"\n{stopped}" if stopped else "")
            )
        if stopped:
            results.append(stopped)
        return ToolResult("\n".join(results))


def _glob_matches(path: Path, root: Path, file_glob: str) -> bool:
    if "/" not in file_glob:
        return fnmatch.fnmatch(path.name, file_glob)
    relative = path.relative_to(root).as_posix() if path != root else path.name
    # fnmatch's `*` crosses `/`, so `**/` only needs its zero-folder form added.
    candidates = [file_glob, file_glob.replace("**/", "")]
    return any(fnmatch.fnmatch(relative, candidate) for candidate in candidates)
