"""Agent runtimes. `create_backend` picks one by the boot payload's `runtime`."""

from __future__ import annotations

import asyncio
import importlib

from driver.backends.base import (
    Backend,
    EventSink,
    RunFailure,
    RunInput,
    import_module,
    import_packages,
    require_packages,
)
from driver.backends.unsupported import UnsupportedBackend
from driver.protocol import ExecutionSpec

SUPPORTED_RUNTIMES = ["openai", "claude", "acp"]
# Each runtime's module: imported only by a driver that runs it. Its SDK (its PACKAGES) is
# imported later still, by the first run: an idle driver does not carry it.
RUNTIME_MODULES = {
    "openai": "driver.backends.openai",
    "claude": "driver.backends.claude",
    "acp": "driver.backends.acp",
}


async def warm_up(runtime: str) -> None:
    """Import the runtime's module ahead of a run and check that its SDK is installed: what
    a standby driver does before it says it is ready, so that a broken image fails here, not
    in a run. The SDK itself stays out (tens of MB in every standby driver); the first run
    imports it. In a thread, so the connection's heartbeats go on meanwhile."""
    name = RUNTIME_MODULES.get(runtime)
    if name is not None:
        module = await asyncio.to_thread(import_module, name)
        require_packages(runtime, *module.PACKAGES)


async def prefetch(runtime: str) -> None:
    """Import the runtime's SDK now: a standby driver that was just given its run starts it
    while its input is on its way, rather than at the run's first model call."""
    name = RUNTIME_MODULES.get(runtime)
    if name is not None:
        await import_packages(*importlib.import_module(name).PACKAGES)


def create_backend(
    runtime: str, spec: ExecutionSpec, sink: EventSink, *, gateway_url: str
) -> Backend:
    """`gateway_url` is the forwarder's `http://127.0.0.1:<port>/gateway` (no trailing slash)."""
    if runtime == "openai":
        from driver.backends.openai import OpenAIBackend  # only in a driver that runs it

        return OpenAIBackend(
            spec,
            sink,
            model_base_url=f"{gateway_url}/openai/v1",
            mcp_base_url=f"{gateway_url}/mcp",
        )
    if runtime == "claude":
        from driver.backends.claude import ClaudeBackend  # only in a driver that runs it

        return ClaudeBackend(
            spec,
            sink,
            model_base_url=f"{gateway_url}/anthropic",
            mcp_base_url=f"{gateway_url}/mcp",
        )
    if runtime == "acp":
        from driver.backends.acp import AcpBackend  # only in a driver that runs it

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
    "prefetch",
    "warm_up",
]
