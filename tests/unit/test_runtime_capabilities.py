"""The runtime catalog (mosoo_core/agents/_catalog.py) and the driver's backends keep two
registries of what each runtime can do and what its agent calls Mosoo's tools; mosoo_core
may not import the backends, so these tests check the two agree (issue 13 items 4 and 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from driver.backends import SUPPORTED_RUNTIMES, create_backend
from driver.backends.claude import CLAUDE_TOOLS
from driver.backends.opencode import TOOL_PERMISSIONS
from driver.protocol import CAPABILITIES, ExecutionSpec, GatewayGrant
from mosoo_core.agents import BUILTIN_TOOLS, RUNTIMES


class _Sink:
    """Backends only keep their sink when built; nothing is sent here."""

    def emit(self, run_id: str, kind: str, payload: dict[str, Any] | None = None) -> str:
        raise AssertionError("no event expected")

    def command_update(
        self,
        command_id: str,
        status: str,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        raise AssertionError("no command update expected")


def _backend_capabilities(runtime: str, workspace: Path) -> tuple[str, ...]:
    """The capabilities the driver reports in hello for `runtime`: the backend it builds
    from a boot payload's runtime (driver/main.py calls the same `create_backend`)."""
    spec = ExecutionSpec(
        app_id="app_1",
        agent_id="agt_1",
        session_id="ses_1",
        runtime=runtime,
        model="test-model",
        gateway=GatewayGrant(grant="grant"),
        workspace=str(workspace),
    )
    backend = create_backend(runtime, spec, _Sink(), gateway_url="http://127.0.0.1:9/gateway")
    return tuple(backend.capabilities)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_the_catalog_says_what_the_runtimes_backend_reports_in_hello(
    name: str, tmp_path: Path
) -> None:
    runtime = RUNTIMES[name]
    reported = _backend_capabilities(name, tmp_path)
    assert len(reported) == len(set(reported))
    if runtime.implemented:
        assert name in SUPPORTED_RUNTIMES
        assert set(reported) == set(runtime.capabilities)
    else:
        assert reported == ()


def test_every_capability_name_is_in_the_protocols_vocabulary() -> None:
    for runtime in RUNTIMES.values():
        assert runtime.capabilities <= CAPABILITIES, runtime.name
    # The vocabulary the issue names: text, thinking, tools, permissions, cancel, usage,
    # resume, skills, MCP.
    assert {
        "text_stream",
        "thinking_stream",
        "tool_stream",
        "permission_requests",
        "cancel",
        "usage",
        "resume",
        "skills",
        "mcp",
    } == CAPABILITIES


def test_a_runtime_the_driver_does_not_implement_reports_no_capabilities(
    tmp_path: Path,
) -> None:
    assert "goose" not in SUPPORTED_RUNTIMES
    assert _backend_capabilities("goose", tmp_path) == ()


def test_the_catalogs_tool_names_are_the_drivers_mapping() -> None:
    assert RUNTIMES["claude"].tool_names == CLAUDE_TOOLS
    assert RUNTIMES["acp"].tool_names == TOOL_PERMISSIONS
    for name in ("claude", "acp"):
        assert set(RUNTIMES[name].tool_names) == set(BUILTIN_TOOLS), name
    # The openai runtime's tools are Mosoo's own.
    assert RUNTIMES["openai"].tool_names == {}
    assert [RUNTIMES["openai"].tool_label(tool) for tool in BUILTIN_TOOLS] == list(BUILTIN_TOOLS)
    assert RUNTIMES["claude"].tool_label("edit") == "Edit, NotebookEdit"
    assert RUNTIMES["acp"].tool_label("web_fetch") == "webfetch"
