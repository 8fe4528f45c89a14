"""What an MCP server's fields and an Agent's MCP tool policies may hold. Pure functions
(but for `MOSOO_MCP_ALLOW_PRIVATE_NETWORKS`, read by `clean_url`): the service, the Agent
service and the API schemas share these rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from mosoo_core.errors import FieldConflict, InvalidInput
from mosoo_core.network import outbound

NAME_MAX = 32
# Letters, digits, single `-` or `_` between them: the model sees `<name>__<tool>`, so a
# name never holds `__` itself and fits OpenAI's function-name rule with its tools.
NAME_PATTERN = r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$"
DESCRIPTION_MAX = 500
URL_MAX = 2000
TOKEN_MAX = 4096
MAX_HEADERS = 16
HEADER_VALUE_MAX = 4096
HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
# Headers an owner cannot set: they describe the hop or the MCP session, which Mosoo manages.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "transfer-encoding",
        "te",
        "upgrade",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
SCOPES_MAX = 1000
CLIENT_ID_MAX = 500
POLICIES = ("off", "allow", "ask")
DEFAULT_POLICY = "ask"
TOOL_NAME_MAX = 128
MAX_TOOL_OVERRIDES = 200


def clean_name(raw: str) -> str:
    name = (raw or "").strip()
    if not name:
        raise InvalidInput("Name the MCP server.", field="name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"Names are at most {NAME_MAX} characters.", field="name")
    if not re.match(NAME_PATTERN, name):
        raise InvalidInput(
            "Names are lower-case letters and digits, with single - or _ between them, "
            "starting with a letter (the agent sees its tools as <name>__<tool>).",
            field="name",
        )
    return name


def clean_description(raw: str) -> str:
    text = " ".join((raw or "").split())
    if len(text) > DESCRIPTION_MAX:
        raise InvalidInput(
            f"Descriptions are at most {DESCRIPTION_MAX} characters.", field="description"
        )
    return text


def clean_url(raw: str, field: str = "url") -> str:
    """An http(s) URL without credentials or a fragment, whose host is not an address of a
    refused range (private, loopback, metadata...: see `network.outbound`)."""
    url = (raw or "").strip()
    if not url:
        raise InvalidInput("Enter the server's URL.", field=field)
    if len(url) > URL_MAX:
        raise InvalidInput(f"URLs are at most {URL_MAX} characters.", field=field)
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        _ = parts.port  # raises on a malformed port
    except ValueError:
        raise InvalidInput("That is not a valid URL.", field=field) from None
    if (
        parts.scheme not in ("http", "https")
        or not hostname
        or any(c.isspace() or not c.isprintable() for c in url)
    ):
        raise InvalidInput("The URL must be an http:// or https:// URL.", field=field)
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            "Put credentials in the authentication fields, not in the URL.", field=field
        )
    if parts.fragment or url.endswith("#"):
        raise InvalidInput("The URL cannot have a #fragment.", field=field)
    # Names are checked when connecting (they resolve then); an address is refused now, as
    # a conflict: the URL is well-formed, the operator's network rules refuse it.
    refusal = outbound.literal_refusal(hostname)
    if refusal is not None:
        raise FieldConflict(refusal[0].upper() + refusal[1:] + ".", field=field)
    return url


def clean_token(raw: str, field: str = "bearer_token") -> str:
    token = (raw or "").strip()
    if not token:
        raise InvalidInput("Enter the token.", field=field)
    if len(token) > TOKEN_MAX:
        raise InvalidInput(f"Tokens are at most {TOKEN_MAX} characters.", field=field)
    if any(c.isspace() or not c.isprintable() for c in token):
        raise InvalidInput("The token cannot contain spaces or line breaks.", field=field)
    return token


def clean_headers(raw: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise InvalidInput("Headers are an object of names and values.", field="headers")
    if not raw:
        raise InvalidInput("Give at least one header.", field="headers")
    if len(raw) > MAX_HEADERS:
        raise InvalidInput(f"At most {MAX_HEADERS} headers.", field="headers")
    cleaned: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not re.match(HEADER_NAME_PATTERN, name):
            raise InvalidInput(f"{name!r} is not a header name.", field="headers")
        if name.lower() in RESERVED_HEADERS:
            raise InvalidInput(
                f"{name} is set by Mosoo, not by a server's headers.", field="headers"
            )
        if name.lower() in {n.lower() for n in cleaned}:
            # Well-formed JSON a form could send: a conflict, not a malformed request.
            raise FieldConflict(f"{name} is listed twice.", field="headers")
        text = value.strip() if isinstance(value, str) else ""
        if not text or len(text) > HEADER_VALUE_MAX or any(not " " <= c <= "~" for c in text):
            raise InvalidInput(
                f"{name} needs a value of at most {HEADER_VALUE_MAX} printable ASCII characters.",
                field="headers",
            )
        cleaned[name] = text
    return cleaned


def clean_scopes(raw: str) -> str:
    scopes = " ".join((raw or "").split())
    if len(scopes) > SCOPES_MAX:
        raise InvalidInput(f"Scopes are at most {SCOPES_MAX} characters.", field="oauth_scopes")
    return scopes


def clean_client_id(raw: str) -> str:
    client_id = (raw or "").strip()
    if not client_id:
        raise InvalidInput("Enter the OAuth client id.", field="oauth_client_id")
    if len(client_id) > CLIENT_ID_MAX or any(c.isspace() for c in client_id):
        raise InvalidInput(
            f"Client ids are at most {CLIENT_ID_MAX} characters, without spaces.",
            field="oauth_client_id",
        )
    return client_id


def clean_policy(value: Any, field: str = "mcp_policies") -> str:
    if value not in POLICIES:
        raise InvalidInput(f"An MCP tool policy is off, allow or ask, not {value!r}.", field=field)
    return str(value)


def clean_server_policy(value: Any) -> dict[str, Any]:
    """One bound server's policy: `default` (off, allow or ask), per-tool overrides and
    `required`. Missing keys take their defaults (ask, none, not required)."""
    if not isinstance(value, Mapping):
        raise InvalidInput("Each server's policy is an object.", field="mcp_policies")
    unknown = set(value) - {"default", "tools", "required"}
    if unknown:
        raise InvalidInput(
            f"Unknown policy field {sorted(unknown)[0]!r} (default, tools, required).",
            field="mcp_policies",
        )
    tools = value.get("tools") or {}
    if not isinstance(tools, Mapping):
        raise InvalidInput(
            "Tool overrides are an object of names and policies.", field="mcp_policies"
        )
    if len(tools) > MAX_TOOL_OVERRIDES:
        raise InvalidInput(
            f"At most {MAX_TOOL_OVERRIDES} tool overrides a server.", field="mcp_policies"
        )
    cleaned_tools: dict[str, str] = {}
    for name, policy in tools.items():
        if not isinstance(name, str) or not name or len(name) > TOOL_NAME_MAX:
            raise InvalidInput(
                f"Tool names are 1 to {TOOL_NAME_MAX} characters.", field="mcp_policies"
            )
        cleaned_tools[name] = clean_policy(policy)
    required = value.get("required", False)
    if not isinstance(required, bool):
        raise InvalidInput("required is true or false.", field="mcp_policies")
    return {
        "default": clean_policy(value.get("default", DEFAULT_POLICY)),
        "tools": cleaned_tools,
        "required": required,
    }


def server_policy(policies: Mapping[str, Any] | None, server_id: str) -> dict[str, Any]:
    """The policy of one bound server, with the defaults for what is not set."""
    stored = (policies or {}).get(server_id)
    if not isinstance(stored, Mapping):
        return {"default": DEFAULT_POLICY, "tools": {}, "required": False}
    return {
        "default": stored.get("default", DEFAULT_POLICY)
        if stored.get("default") in POLICIES
        else DEFAULT_POLICY,
        "tools": {str(k): v for k, v in (stored.get("tools") or {}).items() if v in POLICIES},
        "required": stored.get("required") is True,
    }
