"""MCP servers from code or CI: list, create, read, change, delete, and test the connection
(the server's tool list). Credentials are write-only: no answer carries one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from mosoo_core import identity, mcp
from mosoo_core.db import session_scope
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import answer_once
from mosoo_web.api.v1.environments import app_for
from mosoo_web.api.v1.mcp_schemas import (
    CreateMcpServer,
    McpServer,
    McpServerId,
    McpServerList,
    McpTestAnswer,
    UpdateMcpServer,
)
from mosoo_web.api.v1.schemas import (
    JSON_BODY_TOO_LARGE,
    NO_NUL,
    REPLAYED_DOC,
    Deleted,
    IdempotencyKey,
)

router = APIRouter(tags=["MCP servers"])

_INVALID = "`invalid_request`: a field is invalid; `field` names it."
_CONFLICTS = (
    "`name_taken`: another server of the App has the name. `conflict` (`field` names it): a "
    "credential that does not go with `auth_kind`, or one `auth_kind` needs and none is "
    "stored (`bearer_token`, `headers`, `oauth_client_id`), a header given twice, one OAuth "
    "endpoint without the other, a URL whose host is an address the installation refuses "
    "(private, loopback, metadata...: see `MOSOO_MCP_ALLOW_PRIVATE_NETWORKS`)."
)


@router.get(
    "/mcp-servers",
    response_model=McpServerList,
    operation_id="listMcpServers",
    summary="List MCP servers",
    description="The MCP servers of the token owner's Apps (or of one, with `app_id`), by name.",
    responses=error_responses(404),
)
async def list_mcp_servers(
    caller: CallerDep,
    app_id: Annotated[str | None, Query(max_length=26, pattern=NO_NUL)] = None,
) -> McpServerList:
    def work() -> McpServerList:
        with session_scope() as db:
            apps = (
                [identity.get_app(db, caller.account_id, app_id)]
                if app_id
                else identity.list_apps(db, caller.account_id)
            )
            return McpServerList(
                mcp_servers=[
                    McpServer.of(view)
                    for app in apps
                    for view in mcp.list_servers(db, caller.account_id, app.id)
                ]
            )

    return await run_in_threadpool(work)


@router.post(
    "/mcp-servers",
    status_code=201,
    response_model=McpServer,
    operation_id="createMcpServer",
    summary="Add an MCP server",
    description="Nothing is contacted yet: `POST /mcp-servers/{id}/test` connects and lists "
    "its tools. `app_id` defaults to the account's first App.",
    responses={
        201: {"headers": REPLAYED_DOC},
        **error_responses(404, conflicts=_CONFLICTS, invalid=_INVALID),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def create_mcp_server(
    body: CreateMcpServer,
    request: Request,
    caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    def work() -> McpServer:
        app_id = app_for(caller.account_id, body.app_id)
        with session_scope() as db:
            changes = body.changes()
            return McpServer.of(
                mcp.create_server(
                    db,
                    caller.account_id,
                    app_id,
                    mcp.McpServerChanges(
                        **{**changes.set_fields(), "name": body.name, "url": body.url}
                    ),
                )
            )

    # The stored answer never holds a credential; the request body (with them) is only hashed.
    return await answer_once(
        request, caller, "POST /mcp-servers", body.model_dump(mode="json"), 201, work
    )


def _get(account_id: str, server_id: str) -> McpServer:
    with session_scope() as db:
        app_id = mcp.mcp_server_app_id(db, account_id, server_id)
        return McpServer.of(mcp.get_server(db, account_id, app_id, server_id))


@router.get(
    "/mcp-servers/{server_id}",
    response_model=McpServer,
    operation_id="getMcpServer",
    summary="Get an MCP server",
    responses=error_responses(404),
)
async def get_mcp_server(server_id: McpServerId, caller: CallerDep) -> McpServer:
    return await run_in_threadpool(_get, caller.account_id, server_id)


@router.patch(
    "/mcp-servers/{server_id}",
    response_model=McpServer,
    operation_id="updateMcpServer",
    summary="Change an MCP server",
    description="A field left out keeps its value; a credential left out keeps the stored "
    "one. A new URL or OAuth client forgets the OAuth tokens (connect again).",
    responses={
        **error_responses(404, conflicts=_CONFLICTS, invalid=_INVALID),
        413: JSON_BODY_TOO_LARGE,
    },
)
async def update_mcp_server(
    server_id: McpServerId, body: UpdateMcpServer, caller: CallerDep
) -> McpServer:
    def work() -> McpServer:
        with session_scope() as db:
            app_id = mcp.mcp_server_app_id(db, caller.account_id, server_id)
            return McpServer.of(
                mcp.update_server(db, caller.account_id, app_id, server_id, body.changes())
            )

    return await run_in_threadpool(work)


@router.delete(
    "/mcp-servers/{server_id}",
    response_model=Deleted,
    operation_id="deleteMcpServer",
    summary="Delete an MCP server",
    description="Refused while an agent, a published version or a running thread uses it.",
    responses=error_responses(
        404, conflicts="`conflict`: in use (the message names what uses it)."
    ),
)
async def delete_mcp_server(server_id: McpServerId, caller: CallerDep) -> Deleted:
    def work() -> Deleted:
        with session_scope() as db:
            app_id = mcp.mcp_server_app_id(db, caller.account_id, server_id)
            mcp.delete_server(db, caller.account_id, app_id, server_id)
        return Deleted(id=server_id)

    return await run_in_threadpool(work)


@router.post(
    "/mcp-servers/{server_id}/test",
    response_model=McpTestAnswer,
    operation_id="testMcpServer",
    summary="Test the connection to an MCP server",
    description="Opens an MCP session with the server (its credential added by Mosoo) and "
    "lists its tools: `ok` and `tools`, or `ok: false` and why. The list is stored as the "
    "server's `tools` (the tool browser).",
    responses=error_responses(404),
)
async def test_mcp_server(server_id: McpServerId, caller: CallerDep) -> McpTestAnswer:
    def work() -> McpTestAnswer:
        with session_scope() as db:
            app_id = mcp.mcp_server_app_id(db, caller.account_id, server_id)
        return McpTestAnswer.of(mcp.test_server(caller.account_id, app_id, server_id))

    return await run_in_threadpool(work)
