"""The control process: one ASGI app served on a Unix socket (local sandboxes) and on TCP
(remote drivers). Driver sessions, ingestion and the model gateway arrive with the runtime
issue; today it answers health checks on both endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mosoo_core.logs import configure_logging, get_logger
from mosoo_core.settings import get_settings

log = get_logger(__name__)


async def health(_request: Request) -> JSONResponse:
    return JSONResponse({"ok": True, "service": "control"})


def build_app() -> Starlette:
    return Starlette(routes=[Route("/control/health", health)])


async def _serve_all() -> None:
    settings = get_settings()
    socket_path = settings.resolved_control_socket
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    app = build_app()
    common = {"log_level": "warning", "access_log": False, "lifespan": "off"}
    servers = [
        uvicorn.Server(uvicorn.Config(app, uds=str(socket_path), **common)),  # type: ignore[arg-type]
        uvicorn.Server(uvicorn.Config(app, host=settings.control_host, port=settings.control_port, **common)),  # type: ignore[arg-type]
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
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            break
        await asyncio.sleep(0.05)
    if all(server.started for server in servers):
        os.chmod(socket_path, 0o666)  # sandbox users (non-root) must be able to dial it
        log.info("control.ready", socket=str(socket_path), host=settings.control_host, port=settings.control_port)
    await asyncio.gather(*tasks)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    log.info("control.stopped")


def serve() -> None:
    settings = get_settings()
    configure_logging("control", settings.log_level, settings.log_json)
    asyncio.run(_serve_all())
