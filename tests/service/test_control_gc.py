"""Control leaves what its start made out of garbage collections once it serves: a full
collection walked every one of those objects with the GIL held (50-220 ms at 10,000
events/s, every few seconds: `bench/events.py`)."""

from __future__ import annotations

import asyncio
import gc
import socket

import pytest
import uvicorn


def test_control_freezes_its_start_up_objects_once_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mosoo_core.control import server

    frozen_while_starting: list[int] = []

    async def serve(self: uvicorn.Server, sockets: object = None) -> None:
        if self.config.uds:  # what uvicorn makes (control then opens it to sandboxes)
            with socket.socket(socket.AF_UNIX) as listener:
                listener.bind(self.config.uds)
        self.started = True
        frozen_while_starting.append(gc.get_freeze_count())

    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    gc.unfreeze()
    try:
        asyncio.run(server._serve_all())
        assert frozen_while_starting == [0, 0]  # both servers, before the freeze
        # The modules control imported, its app, its settings: tens of thousands of objects.
        assert gc.get_freeze_count() > 20_000
    finally:
        gc.unfreeze()
