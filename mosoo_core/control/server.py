"""The control process: one ASGI app served on a Unix socket (local sandboxes) and on TCP
(remote drivers): the driver WebSocket, the heartbeat sweep, the model gateway and the
MCP proxy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from driver.protocol import MAX_FRAME_BYTES
from mosoo_core import streams, wal
from mosoo_core.control import _traces
from mosoo_core.control._event_writer import EventWriter, request_teardown
from mosoo_core.control.driver_socket import DriverConnection
from mosoo_core.control.egress import egress_socket_path, serving_egress
from mosoo_core.control.gateway import Upstream
from mosoo_core.control.gateway import build_routes as gateway_routes
from mosoo_core.control.mcp_proxy import build_routes as mcp_routes
from mosoo_core.control.workspace import build_routes as workspace_routes
from mosoo_core.db import get_engine, session_scope
from mosoo_core.logs import configure_logging, get_logger
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import get_settings
from mosoo_core.tables.vault import ProviderCredential
from mosoo_core.vault import reveal_provider_key

log = get_logger(__name__)
# The event writer's thread lets go of the GIL for each database call (about ten a group)
# and, while the event loop is busy, waited up to Python's 5 ms switch interval to get it
# back each time. At 1 ms, bench/events.py (50 streams, 10,000 events/s, turn about):
# p99 0.45-0.77x on SQLite and 0.65x on PostgreSQL, control's CPU no higher.
GIL_SWITCH_SECONDS = 0.001


async def health(_request: Request) -> JSONResponse:
    return JSONResponse({"ok": True, "service": "control"})


def build_app() -> Starlette:
    settings = get_settings()
    redis = aioredis.Redis.from_url(settings.redis_url)
    writer = EventWriter(redis)  # every connection's event batches, group-committed

    async def driver_socket(websocket: WebSocket) -> None:
        await DriverConnection(
            websocket, redis, settings.driver_heartbeat_interval_ms, writer
        ).run()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(_sweep_forever(settings.driver_heartbeat_interval_ms))
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await writer.close()

    return Starlette(
        routes=[
            Route("/control/health", health),
            WebSocketRoute("/driver/socket", driver_socket),
            *gateway_routes(resolve_upstream),
            *mcp_routes(),
            *workspace_routes(),
        ],
        lifespan=lifespan,
    )


def resolve_upstream(db: Any, grant: driver_plane.GrantContext) -> Upstream:
    """The provider behind a run's credential (which must be of the run's App), with its key
    decrypted in memory for one call."""
    credential = db.get(ProviderCredential, grant.credential_id)
    if credential is None or credential.app_id != grant.app_id:
        raise LookupError("provider credential is gone")
    key = reveal_provider_key(db, grant.credential_id, app_id=grant.app_id)
    return Upstream(provider=credential.provider, base_url=credential.base_url, api_key=key or None)


def sweep_once(heartbeat_interval_ms: int) -> int:
    """Missed heartbeats -> `rescheduling`; 120 s without the driver -> `driver_lost`."""
    with session_scope() as db:
        stored = driver_plane.sweep_lost_drivers(
            db, heartbeat_interval=timedelta(milliseconds=heartbeat_interval_ms)
        )
    streams.publish_events(stored)
    _traces.record_run_ends(stored)  # control failed them (`driver_lost`): their turns end
    request_teardown(stored)
    return len(stored)


async def _sweep_forever(heartbeat_interval_ms: int) -> None:
    period = max(1.0, heartbeat_interval_ms / 1000)
    while True:
        await asyncio.sleep(period)
        try:
            await asyncio.to_thread(sweep_once, heartbeat_interval_ms)
        except Exception as error:
            log.warning("control.sweep_failed", error=type(error).__name__)


def _prepare_socket_dir(directory: Path) -> None:
    """The socket's own directory, which sandboxes bind-mount (not the socket itself, so a
    restart's new socket shows up in running sandboxes). The sandbox user (uid 10001) must
    be able to traverse it: 0755 when we create it; an existing one is left as it is."""
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o755)
    elif not directory.stat().st_mode & 0o001:
        log.warning("control.socket_dir_not_traversable", directory=str(directory))


def freeze_start_up_objects() -> None:
    """Leave what the start made (modules, SQLAlchemy's metadata, pydantic's schemas: over
    100,000 objects) out of every later garbage collection. A full collection walks every
    tracked object with the GIL held, so it stopped the whole process (the loop and the event
    writer) for 50-220 ms every few seconds at 10,000 events/s. Frozen objects are still
    freed by reference counting; only a cycle among them would stay (they live as long as
    the process anyway)."""
    gc.collect()
    gc.freeze()


async def _serve_all() -> None:
    settings = get_settings()
    socket_path = settings.resolved_control_socket
    _prepare_socket_dir(socket_path.parent)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    app = build_app()

    # Both servers share one app; its lifespan (the sweep) runs once, with the TCP server.
    def config(**where: Any) -> uvicorn.Config:
        return uvicorn.Config(
            app, log_level="warning", access_log=False, ws_max_size=MAX_FRAME_BYTES + 1024, **where
        )

    servers = [
        # Local drivers' frames are small JSON on a Unix socket: compressing them costs CPU
        # on both ends and saves nothing.
        uvicorn.Server(config(uds=str(socket_path), lifespan="off", ws_per_message_deflate=False)),
        uvicorn.Server(
            config(host=settings.control_host, port=settings.control_port, lifespan="on")
        ),
    ]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        if all(server.should_exit for server in servers):
            return
        log.info("control.stopping")
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    # The egress proxy of `limited` sandboxes, on its socket beside control.sock.
    async with serving_egress(egress_socket_path()):
        tasks = [asyncio.create_task(server.serve()) for server in servers]
        while not all(server.started for server in servers):
            if any(task.done() for task in tasks):
                break
            await asyncio.sleep(0.05)
        if all(server.started for server in servers):
            os.chmod(socket_path, 0o666)  # sandbox users (non-root) must be able to dial it
            log.info(
                "control.ready",
                socket=str(socket_path),
                host=settings.control_host,
                port=settings.control_port,
            )
            freeze_start_up_objects()
        await asyncio.gather(*tasks)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    log.info("control.stopped")


def serve() -> None:
    settings = get_settings()
    configure_logging("control", settings.log_level, settings.log_json)
    # Most commits are the event writer's: on SQLite the log is checkpointed beside them,
    # not inside them (see mosoo_core.wal).
    checkpointer = wal.checkpoint_in_a_thread(get_engine())
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    try:
        asyncio.run(_serve_all())
    finally:
        sys.setswitchinterval(switch_interval)
        if checkpointer is not None:
            checkpointer.stop()
