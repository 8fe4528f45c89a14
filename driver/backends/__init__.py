"""Agent runtimes. `create_backend` picks one by the boot payload's `runtime`."""

from __future__ import annotations

from driver.backends.base import Backend, EventSink, RunFailure, RunInput
from driver.backends.unsupported import UnsupportedBackend
from driver.protocol import ExecutionSpec

SUPPORTED_RUNTIMES = ["openai", "claude", "acp"]


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


__all__ = ["SUPPORTED_RUNTIMES", "Backend", "EventSink", "RunFailure", "RunInput", "create_backend"]
