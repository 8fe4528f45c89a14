"""What the scripted servers keep of each request they get, read the same way by all."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request


async def read_request(request: Request) -> tuple[Any, dict[str, str]]:
    """The request's parsed JSON body (None when empty or not JSON) and its headers with
    lower-case names."""
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return body, {k.lower(): v for k, v in request.headers.items()}
