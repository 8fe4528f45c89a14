"""Request and response shapes of MCP servers. Credentials are write-only: requests may carry
them, no answer does (`has_credential`, `header_names` and `oauth.connected` say what is
stored)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, Field, StrictBool

from mosoo_core.changes import UNSET
from mosoo_core.mcp import NAME_PATTERN, McpServerChanges, McpServerView, McpTestResult, McpToolView
from mosoo_core.mcp.validation import (
    CLIENT_ID_MAX,
    DESCRIPTION_MAX,
    HEADER_NAME_PATTERN,
    HEADER_VALUE_MAX,
    MAX_HEADERS,
    MAX_TOOL_OVERRIDES,
    NAME_MAX,
    RESERVED_HEADERS,
    SCOPES_MAX,
    TOKEN_MAX,
    TOOL_NAME_MAX,
    URL_MAX,
)
from mosoo_web.api.v1.schemas import NO_NUL, _Request

McpServerId = Annotated[str, Path(pattern=NO_NUL, description="An MCP server id.")]
AuthKind = Literal["none", "bearer", "headers", "oauth"]
Policy = Literal["off", "allow", "ask"]
_PORT = r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
# http(s), a host name, an optional port, then a path and query without spaces or a fragment.
URL_PATTERN = rf"^https?://[A-Za-z0-9._-]+{_PORT}([/?][!-\"$-~]*)?$"
Url = Annotated[
    str,
    Field(
        min_length=1,
        max_length=URL_MAX,
        pattern=URL_PATTERN,
        examples=["https://mcp.example.com/mcp"],
    ),
]
OptionalUrl = Annotated[
    str,
    Field(max_length=URL_MAX, pattern=rf"^(|https?://[A-Za-z0-9._-]+{_PORT}([/?][!-\"$-~]*)?)$"),
]
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
Token = Annotated[str, Field(min_length=1, max_length=TOKEN_MAX, pattern=r"^[!-~]+$")]
HeaderValue = Annotated[
    str, Field(min_length=1, max_length=HEADER_VALUE_MAX, pattern=r"^ *[!-~][ -~]*$")
]


def _case_free(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


HEADERS_SCHEMA: dict[str, Any] = {
    "propertyNames": {
        "pattern": HEADER_NAME_PATTERN,
        "not": {"pattern": "^(" + "|".join(_case_free(h) for h in sorted(RESERVED_HEADERS)) + ")$"},
    }
}


class McpServerContent(_Request):
    """In PATCH a field left out keeps the stored value; credentials are never answered."""

    description: str | None = Field(default=None, max_length=DESCRIPTION_MAX, pattern=NO_NUL)
    url: Url | None = Field(default=None, description="The Streamable HTTP endpoint.")
    enabled: StrictBool | None = Field(
        default=None, description="A disabled server makes the agents that bind it not ready."
    )
    auth_kind: AuthKind | None = Field(
        default=None,
        description="`none`; `bearer` (`bearer_token`); `headers` (custom `headers`); `oauth` "
        "(authorization code with PKCE: the owner connects it from the console).",
    )
    bearer_token: Token | None = Field(default=None, description="Write-only.")
    headers: dict[str, HeaderValue] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_HEADERS,
        json_schema_extra=HEADERS_SCHEMA,
        description="Write-only values; their names are answered in `header_names`.",
    )
    oauth_client_id: str | None = Field(
        default=None, min_length=1, max_length=CLIENT_ID_MAX, pattern=r"^[!-~]+$"
    )
    oauth_client_secret: str | None = Field(
        default=None,
        max_length=TOKEN_MAX,
        pattern=r"^([!-~]+)?$",
        description="Write-only; an empty string removes it (a public client, PKCE only).",
    )
    oauth_scopes: str | None = Field(default=None, max_length=SCOPES_MAX, pattern=NO_NUL)
    oauth_authorization_endpoint: OptionalUrl | None = Field(
        default=None,
        description="With `oauth_token_endpoint`; both empty: discovered from the server's "
        "metadata when it is connected.",
    )
    oauth_token_endpoint: OptionalUrl | None = None

    def changes(self) -> McpServerChanges:
        given = self.model_dump(exclude_unset=True)
        values = {key: value for key, value in given.items() if value is not None}
        fields = McpServerChanges.__dataclass_fields__
        return McpServerChanges(**{key: values.get(key, UNSET) for key in fields})


class CreateMcpServer(McpServerContent):
    app_id: str | None = Field(
        default=None,
        max_length=26,
        pattern=NO_NUL,
        description="The account's first App if left out.",
    )
    name: Name = Field(description="Unique in the App; the agent sees `<name>__<tool>`.")
    url: Url = Field(description="The Streamable HTTP endpoint.")


class UpdateMcpServer(McpServerContent):
    name: Name | None = None


class McpTool(BaseModel):
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]

    @classmethod
    def of(cls, view: McpToolView) -> McpTool:
        return cls(
            name=view.name,
            title=view.title,
            description=view.description,
            input_schema=view.input_schema,
        )


class McpOAuth(BaseModel):
    client_id: str
    has_client_secret: bool
    scopes: str
    authorization_endpoint: str = Field(description="Empty until discovered or configured.")
    token_endpoint: str
    connected: bool = Field(description="Tokens are stored (sealed in the vault).")
    connected_at: datetime | None
    authorize_path: str = Field(
        description="Where the console sends a signed-in browser to connect the server."
    )


class McpServer(BaseModel):
    id: str
    app_id: str
    name: str
    description: str
    url: str
    auth_kind: AuthKind
    enabled: bool
    has_credential: bool = Field(description="A bearer token or headers are stored.")
    header_names: list[str]
    oauth: McpOAuth | None
    tools: list[McpTool] = Field(description="What the last successful test listed.")
    tested_at: datetime | None
    test_ok: bool | None
    test_error: str = Field(description="Why the last test failed; empty otherwise.")
    used_by: list[str] = Field(description="The agents and published versions that bind it.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: McpServerView) -> McpServer:
        oauth = view.oauth
        return cls(
            id=view.id,
            app_id=view.app_id,
            name=view.name,
            description=view.description,
            url=view.url,
            auth_kind=view.auth_kind,
            enabled=view.enabled,
            has_credential=view.has_credential,
            header_names=view.header_names,
            oauth=McpOAuth(
                client_id=oauth.client_id,
                has_client_secret=oauth.has_client_secret,
                scopes=oauth.scopes,
                authorization_endpoint=oauth.authorization_endpoint,
                token_endpoint=oauth.token_endpoint,
                connected=oauth.connected,
                connected_at=oauth.connected_at,
                authorize_path=oauth.authorize_path,
            )
            if oauth
            else None,
            tools=[McpTool.of(tool) for tool in view.tools],
            tested_at=view.tested_at,
            test_ok=view.test_ok,
            test_error=view.test_error,
            used_by=view.used_by,
            created_at=view.created_at,
            updated_at=view.updated_at,
        )


class McpServerList(BaseModel):
    mcp_servers: list[McpServer]


class McpTestAnswer(BaseModel):
    ok: bool
    error: str = Field(description="Why the connection failed; empty when it worked.")
    tools: list[McpTool]
    server: McpServer

    @classmethod
    def of(cls, result: McpTestResult) -> McpTestAnswer:
        return cls(
            ok=result.ok,
            error=result.error,
            tools=[McpTool.of(tool) for tool in result.tools],
            server=McpServer.of(result.server),
        )


# --- an Agent's MCP policies --------------------------------------------------------------


class McpServerPolicy(_Request):
    default: Policy = Field(default="ask", description="For the server's tools not listed.")
    tools: dict[str, Policy] = Field(
        default_factory=dict,
        max_length=MAX_TOOL_OVERRIDES,
        json_schema_extra={"propertyNames": {"minLength": 1, "maxLength": TOOL_NAME_MAX}},
        description="Per-tool overrides, by the server's tool name.",
    )
    required: StrictBool = Field(
        default=False, description="A run fails with `mcp_unavailable` when it cannot connect."
    )
