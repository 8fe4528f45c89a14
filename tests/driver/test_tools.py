"""The built-in tools, run against a temporary workspace."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from driver.tools import MAX_TOOL_OUTPUT_CHARS, ToolContext, builtin_tools

TOOLS = builtin_tools()


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return ToolContext(
        workspace=workspace, environment={"MOSOO_TEST_GREETING": "hello from the spec"}
    )


async def run(name: str, context: ToolContext, **arguments: object) -> tuple[str, bool]:
    result = await TOOLS[name].run(dict(arguments), context)
    return result.output, result.is_error


def test_every_tool_has_a_function_schema() -> None:
    assert sorted(TOOLS) == ["bash", "edit", "glob", "grep", "read", "web_fetch", "write"]
    for tool in TOOLS.values():
        schema = tool.schema()
        assert schema["type"] == "function"
        assert schema["function"]["name"] == tool.name
        assert schema["function"]["parameters"]["type"] == "object"
        assert schema["function"]["parameters"]["required"]


# --- read ------------------------------------------------------------------------------------


async def test_read_numbers_lines_and_resolves_relative_paths_in_the_workspace(
    context: ToolContext,
) -> None:
    (context.workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    output, is_error = await run("read", context, path="notes.txt")
    assert not is_error
    assert output == "     1\talpha\n     2\tbeta\n     3\tgamma"


async def test_read_with_offset_and_limit_says_how_to_continue(context: ToolContext) -> None:
    (context.workspace / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    output, is_error = await run(
        "read", context, path=str(context.workspace / "n.txt"), offset=3, limit=2
    )
    assert not is_error
    assert output.splitlines()[:2] == ["     3\tline 3", "     4\tline 4"]
    assert "6 more lines" in output and "offset=5" in output


@pytest.mark.parametrize(
    ("setup", "arguments", "message"),
    [
        (None, {"path": "missing.txt"}, "file not found: missing.txt"),
        ("dir", {"path": "sub"}, "is a directory"),
        ("binary", {"path": "blob.bin"}, "binary file"),
        ("text", {"path": "t.txt", "offset": 50}, "past the end"),
        (None, {}, "`path` is required"),
        ("text", {"path": "t.txt", "limit": "ten"}, "`limit` must be an integer"),
    ],
)
async def test_read_errors_are_clear(
    context: ToolContext, setup: str | None, arguments: dict[str, object], message: str
) -> None:
    if setup == "dir":
        (context.workspace / "sub").mkdir()
    elif setup == "binary":
        (context.workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    elif setup == "text":
        (context.workspace / "t.txt").write_text("one\n")
    output, is_error = await run("read", context, **arguments)
    assert is_error
    assert message in output


# --- write -----------------------------------------------------------------------------------


async def test_write_creates_parent_directories_and_reports_the_change(
    context: ToolContext,
) -> None:
    result = await TOOLS["write"].run(
        {"path": "outputs/deep/report.md", "content": "# Report\n"}, context
    )
    assert not result.is_error
    assert (context.workspace / "outputs/deep/report.md").read_text() == "# Report\n"
    assert result.changed_files == [("outputs/deep/report.md", "created")]

    again = await TOOLS["write"].run({"path": "outputs/deep/report.md", "content": "new"}, context)
    assert (context.workspace / "outputs/deep/report.md").read_text() == "new"
    assert again.changed_files == [("outputs/deep/report.md", "modified")]


async def test_write_refuses_a_directory_and_missing_content(context: ToolContext) -> None:
    (context.workspace / "d").mkdir()
    assert (await run("write", context, path="d", content="x"))[1]
    output, is_error = await run("write", context, path="f.txt")
    assert is_error and "`content` is required" in output


# --- edit ------------------------------------------------------------------------------------


async def test_edit_replaces_a_unique_string(context: ToolContext) -> None:
    target = context.workspace / "app.py"
    target.write_text("def greet():\n    return 'hi'\n")
    output, is_error = await run(
        "edit", context, path="app.py", old_string="'hi'", new_string="'hello'"
    )
    assert not is_error, output
    assert target.read_text() == "def greet():\n    return 'hello'\n"


async def test_edit_refuses_a_string_that_is_not_unique_unless_replace_all(
    context: ToolContext,
) -> None:
    target = context.workspace / "a.txt"
    target.write_text("x = 1\nx = 1\n")
    output, is_error = await run(
        "edit", context, path="a.txt", old_string="x = 1", new_string="x = 2"
    )
    assert is_error and "occurs 2 times" in output
    assert target.read_text() == "x = 1\nx = 1\n"

    output, is_error = await run(
        "edit", context, path="a.txt", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert not is_error and "Replaced 2 occurrences" in output
    assert target.read_text() == "x = 2\nx = 2\n"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": "a.txt", "old_string": "absent", "new_string": "y"}, "was not found"),
        ({"path": "a.txt", "old_string": "same", "new_string": "same"}, "identical"),
        ({"path": "nope.txt", "old_string": "a", "new_string": "b"}, "file not found"),
        ({"path": "a.txt", "old_string": "", "new_string": "b"}, "must not be empty"),
    ],
)
async def test_edit_errors_are_clear(
    context: ToolContext, arguments: dict[str, object], message: str
) -> None:
    (context.workspace / "a.txt").write_text("same text\n")
    output, is_error = await run("edit", context, **arguments)
    assert is_error
    assert message in output
    assert (context.workspace / "a.txt").read_text() == "same text\n"


# --- glob and grep ---------------------------------------------------------------------------


async def test_glob_finds_nested_files_relative_to_the_workspace_and_skips_noise(
    context: ToolContext,
) -> None:
    for name in [
        "src/a.py",
        "src/pkg/b.py",
        "src/c.txt",
        "top.py",
        ".git/hook.py",
        "node_modules/x/y.py",
    ]:
        path = context.workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("pass\n")
    output, is_error = await run("glob", context, pattern="**/*.py")
    assert not is_error
    assert output.splitlines() == ["src/a.py", "src/pkg/b.py", "top.py"]

    output, _ = await run("glob", context, pattern="*.py", path="src")
    assert output.splitlines() == ["src/a.py"]

    output, is_error = await run("glob", context, pattern="*.rs")
    assert not is_error and "no files match" in output


async def test_grep_finds_lines_with_a_regex_and_a_glob_filter(context: ToolContext) -> None:
    (context.workspace / "pkg").mkdir()
    (context.workspace / "pkg/one.py").write_text("import os\nTODO: fix this\n")
    (context.workspace / "pkg/two.md").write_text("TODO: docs\n")
    (context.workspace / "blob.bin").write_bytes(b"TODO\x00\x00")
    output, is_error = await run("grep", context, pattern=r"TODO:\s+\w+")
    assert not is_error
    assert output.splitlines() == ["pkg/one.py:2: TODO: fix this", "pkg/two.md:1: TODO: docs"]

    output, _ = await run("grep", context, pattern="todo", glob="*.py", case_insensitive=True)
    assert output.splitlines() == ["pkg/one.py:2: TODO: fix this"]

    output, _ = await run("grep", context, pattern="import", path="pkg/one.py")
    assert output == "pkg/one.py:1: import os"


async def test_grep_reports_a_bad_regex_and_no_matches(context: ToolContext) -> None:
    output, is_error = await run("grep", context, pattern="([unclosed")
    assert is_error and "invalid regular expression" in output
    output, is_error = await run("grep", context, pattern="nothing-here")
    assert not is_error and "no matches" in output
    output, is_error = await run("grep", context, pattern="x", path="missing-dir")
    assert is_error and "no such file or directory" in output


# --- bash ------------------------------------------------------------------------------------


async def test_bash_runs_in_the_workspace_with_the_spec_environment(context: ToolContext) -> None:
    output, is_error = await run(
        "bash", context, command="pwd; echo $MOSOO_TEST_GREETING; echo oops >&2"
    )
    assert not is_error
    assert output.splitlines() == [str(context.workspace), "hello from the spec", "oops"]


async def test_bash_reports_a_failing_exit_code_as_an_error(context: ToolContext) -> None:
    output, is_error = await run("bash", context, command="echo partial; exit 3")
    assert is_error
    assert output == "partial\n[exit code: 3]"


async def test_bash_kills_a_command_that_times_out(context: ToolContext) -> None:
    started = time.monotonic()
    output, is_error = await run(
        "bash", context, command="echo started; sleep 30", timeout_seconds=1
    )
    assert time.monotonic() - started < 5
    assert is_error
    assert "started" in output and "timed out after 1 s" in output


async def test_bash_caps_long_output_and_says_so(context: ToolContext) -> None:
    output, is_error = await run(
        "bash", context, command="head -c 200000 /dev/zero | tr '\\0' 'a'; echo; echo THE-END"
    )
    assert not is_error
    assert len(output) <= MAX_TOOL_OUTPUT_CHARS
    assert "output truncated" in output
    assert output.startswith("aaaa") and output.endswith("THE-END")


async def test_cancelling_bash_kills_its_whole_process_group(context: ToolContext) -> None:
    pid_file = context.workspace / "child.pid"
    task = asyncio.create_task(
        TOOLS["bash"].run({"command": f"sleep 60 & echo $! > {pid_file}; wait"}, context)
    )
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the command did not start"
        await asyncio.sleep(0.02)
    child = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, "the background child survived the cancel"
        await asyncio.sleep(0.02)


async def test_bash_refuses_bad_input_without_raising(context: ToolContext) -> None:
    output, is_error = await run("bash", context, command="true", timeout_seconds=10_000)
    assert is_error and "`timeout_seconds` must be between 1 and 600" in output
    output, is_error = await run("bash", context)
    assert is_error and "`command` is required" in output
    result = await TOOLS["bash"].run("not an object", context)  # type: ignore[arg-type]
    assert result.is_error


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its dead parent's reaper) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
