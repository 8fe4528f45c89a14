"""`/api/auth/cli`: the CLI's device-flow sign-in (RFC 8628 style).

Polling errors use the RFC 8628 codes (`authorization_pending`, `slow_down`,
`expired_token`, `access_denied`, `invalid_grant`) inside our usual error envelope
`{"error": {"code", "message"}}` with status 400, rather than RFC 6749's flat
`{"error": "..."}`, so every Mosoo endpoint fails the same way.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, MosooError
from mosoo_web.api.errors import error_response
from mosoo_web.client_ip import request_client_ip

router = APIRouter(prefix="/api/auth/cli")

_NO_STORE = {"Cache-Control": "no-store"}


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise InvalidInput("The request body must be JSON.") from None
    if not isinstance(body, dict):
        raise InvalidInput("The request body must be a JSON object.")
    return body


def _optional_string(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"`{field}` must be a string.", field=field)
    return value


@router.post("/start")
async def start(request: Request) -> JSONResponse:
    """A device code for the CLI and a user code for the person to confirm on `/cli-auth`."""
    try:
        body = await _json_object(request)
        client_name = _optional_string(body, "client_name")

        def work() -> identity.DeviceStart:
            with session_scope() as db:
                return identity.start_device_authorization(
                    db, client_name=client_name, ip=request_client_ip(request)
                )

        started = await run_in_threadpool(work)
    except MosooError as error:
        return error_response(error)
    verification_uri = str(request.base_url).rstrip("/") + "/cli-auth"
    return JSONResponse(
        {
            "device_code": started.device_code,
            "user_code": started.user_code,
            "verification_uri": verification_uri,
            "verification_uri_complete": f"{verification_uri}?code={quote(started.user_code)}",
            "expires_in": started.expires_in,
            "interval": started.interval,
        },
        headers=_NO_STORE,
    )


@router.post("/token")
async def token(request: Request) -> JSONResponse:
    """The CLI's poll: the access token once after approval, else a 400 with the reason."""
    try:
        body = await _json_object(request)
        device_code = _optional_string(body, "device_code")
        if not device_code:
            raise InvalidInput("`device_code` is required.", field="device_code")

        def work() -> identity.DeviceGrant | identity.DeviceRefusal:
            with session_scope() as db:
                return identity.poll_device_authorization(db, device_code)

        result = await run_in_threadpool(work)
    except MosooError as error:
        return error_response(error)
    if isinstance(result, identity.DeviceRefusal):
        return JSONResponse(
            {
                "error": {
                    "code": result.code,
                    "message": result.message,
                    "interval": result.interval,
                }
            },
            status_code=400,
            headers=_NO_STORE,
        )
    return JSONResponse(
        {
            "access_token": result.access_token,
            "token_type": "Bearer",
            "account_email": result.account_email,
        },
        headers=_NO_STORE,
    )
