"""A small real ACP agent on stdio, built with the `agent-client-protocol` package (tests only):
the `acp` runtime's "any other agent", started by the `acp_command` provider option.

It cannot load sessions and takes no MCP servers. Each prompt is answered with one message,
by what its last line says: `env` answers the gateway variables and XDG directories it was
started with, as JSON; `die` exits at once with code 3 (a line on stderr first); anything
else is echoed (`echo: <the prompt's text>`), so a test sees what the prompt held.

Run: `python -m tests.support.acp_agent`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

import acp
from acp import schema

SHOWN_VARIABLES = (
    "MOSOO_MODEL",
    "MOSOO_MODEL_BASE_URL",
    "MOSOO_GATEWAY_GRANT",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)


class EchoAgent:
    def __init__(self) -> None:
        self.client: Any = None

    def on_connect(self, connection: Any) -> None:
        self.client = connection

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=schema.AgentCapabilities(load_session=False),
            agent_info=schema.Implementation(name="echo-agent", version="1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id=f"echo-{uuid.uuid4().hex[:8]}")

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        word = text.strip().rsplit("\n", 1)[-1]  # the message itself, after any replay
        if word == "die":
            sys.stderr.write("echo-agent: dying on request\n")
            sys.stderr.flush()
            os._exit(3)
        if word == "env":
            answer = json.dumps({name: os.environ.get(name) for name in SHOWN_VARIABLES})
        else:
            answer = f"echo: {text}"
        await self.client.session_update(
            session_id=session_id,
            update=schema.AgentMessageChunk(
                session_update="agent_message_chunk",
                content=schema.TextContentBlock(type="text", text=answer),
            ),
        )
        return schema.PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None


if __name__ == "__main__":
    asyncio.run(acp.run_agent(EchoAgent()))  # type: ignore[arg-type]
