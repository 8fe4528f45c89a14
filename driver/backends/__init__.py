"""Agent runtimes. `create_backend` picks one by the boot payload's `runtime`."""

from __future__ import annotations

import asyncio
import importlib

from driver.backends.base import Backend, EventSink, RunFailure, RunInput
from driver.backends.unsupported import UnsupportedBackend
from driver.protocol import ExecutionSpec

SUPPORTED_RUNTIMES = ["openai", "claude", "acp"]
# Each runtime's module: imported only by a driver that runs it (its SDK is heavy).
RUNTIME_MODULES = {
    "openai": "driver.backends.openai",
    "claude": "driver.backends.claude",
    "acp": "driver.backends.acp",
}


async def warm_up(runtime: str) -> None:
    """Import the runtime's module (and its SDK) ahead of a run: what a standby driver does
    before it says it is ready, so that a run assigned to it starts at once. In a thread, so
    the connection's heartbeats go on meanwhile."""
    module = RUNTIME_MODULES.get(runtime)
    if module is not None:
        await asyncio.to_thread(importlib.import_module, module)


def create_backend(
    runtime: str, spec: ExecutionSpec, sink: EventSink, *, gateway_url: str
) -> Backend:
    """`gateway_url` is the forwarder's `http://127.0.0.1:<port>/gateway` (no trailing slash)."""
    if runtime == "openai":
        from driver.backends.openai import OpenAIBackend  # imports the SDK only when used

        return OpenAIBackend(
            spec,
            sink,
            model_base_url=f"{gateway_url}/openai/v1",
            mcp_base_url=f"{gateway_url}/mcp",
        )
    if runtime == "claude":
        from driver.backends.claude import ClaudeBackend  # imports the Claude Agent SDK only here

        return ClaudeBackend(
            spec,
            sink,
            model_base_url=f"{gateway_url}/anthropic",
            mcp_base_url=f"{gateway_url}/mcp",
        )
    if runtime == "acp":
        from driver.backends.acp import AcpBackend  # imports the ACP client only here

        return AcpBackend(
            spec,
            sink,
            model_base_url=f"{gateway_url}/openai/v1",
            mcp_base_url=f"{gateway_url}/mcp",
        )
    return UnsupportedBackend(spec, sink, runtime=runtime, supported=SUPPORTED_RUNTIMES)


__all__ = [
    "RUNTIME_MODULES",
    "SUPPORTED_RUNTIMES",
    "Backend",
    "EventSink",
    "RunFailure",
    "RunInput",
    "create_backend",
    "warm_up",
]
