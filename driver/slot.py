"""The driver's one backend, and how it gets its run.

A driver booted with a run (its boot payload carries the execution spec: an Assistant's
driver) makes its backend at once and starts it after the first `welcome`. A driver booted
without one stands by: a warm pool member, or a cold Task start whose run comes over the
connection rather than in a file. It warms its runtime up (imports the SDK), says
`ready {standby: true}`, and makes its backend when control sends `assign` (PROTOCOL.md v2):
the run's network, the thread's workspace restored from control, then `ready`. Before that,
every command but `session.stop` is refused.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import ValidationError

from driver.backends import Backend, create_backend, prefetch, warm_up
from driver.connection import ControlConnection
from driver.egress import EgressForwarder, egress_socket_for, proxy_environment
from driver.forwarder import Forwarder
from driver.protocol import Assignment, BootPayload, Command, ExecutionSpec, build_driver_side
from driver.workspace import restore_workspace

log = logging.getLogger("driver.slot")


class BackendSlot:
    def __init__(
        self, payload: BootPayload, connection: ControlConnection, forwarder: Forwarder
    ) -> None:
        self.payload = payload
        self.connection = connection
        self.forwarder = forwarder
        self.backend: Backend | None = None
        self.egress: EgressForwarder | None = None
        self.stopped = asyncio.Event()  # the backend stopped, or a standby driver was told to
        self._watcher: asyncio.Task[None] | None = None
        self._prefetch: asyncio.Task[None] | None = None
        connection.on_command = self.handle_command

    @property
    def standby(self) -> bool:
        return self.payload.execution_spec is None

    async def prepare(self) -> None:
        """At boot: a driver with its run makes its backend now (started after the first
        welcome); one without stands by."""
        if self.payload.execution_spec is not None:
            await self._make_backend(self.payload.execution_spec)
            self.connection.on_first_welcome = self._start_backend
        else:
            self.connection.standby = True
            self.connection.on_first_welcome = self._warm_up

    async def handle_command(self, command: Command) -> None:
        if command.kind == "assign":
            await self._assign(command)
        elif self.backend is not None:
            await self.backend.handle_command(command)
        elif command.kind == "session.stop":
            log.info("standby_stopped", extra={"reason": command.payload.get("reason", "")})
            self.connection.command_update(command.command_id, "completed")
            self.stopped.set()
        else:
            self.connection.command_update(
                command.command_id, "failed", error="this driver has no run assigned yet"
            )

    async def close(self) -> None:
        if self.backend is not None:
            await self.backend.close()
        for task in (self._watcher, self._prefetch):
            if task is not None:
                task.cancel()
        if self.egress is not None:
            await self.egress.close()

    # --- internals ---------------------------------------------------------------------------

    async def _warm_up(self) -> None:
        await warm_up(self.payload.runtime)
        await asyncio.to_thread(build_driver_side)

    async def _prefetch_sdk(self) -> None:
        try:
            await prefetch(self.payload.runtime)
        except Exception as error:  # the run's first model call imports it again and says why
            log.warning("prefetch_failed", extra={"error": f"{type(error).__name__}: {error}"})

    async def _start_backend(self) -> None:
        assert self.backend is not None
        await self.backend.start()

    async def _assign(self, command: Command) -> None:
        if self.backend is not None:
            self.connection.command_update(
                command.command_id, "failed", error="this driver already has a run"
            )
            return
        try:
            assignment = Assignment.model_validate(command.payload)
        except ValidationError as error:
            # Only the error's type: its message could quote the grant.
            self.connection.command_update(
                command.command_id, "failed", error=f"invalid assignment ({type(error).__name__})"
            )
            return
        spec = assignment.execution_spec
        if spec.runtime != self.payload.runtime:
            self.connection.command_update(
                command.command_id,
                "failed",
                error=f"this driver runs {self.payload.runtime!r}, not {spec.runtime!r}",
            )
            return
        self.connection.command_update(command.command_id, "accepted")
        try:
            if assignment.restore_workspace:
                await restore_workspace(
                    self.payload.control_url, spec.gateway.grant, spec.workspace
                )
            self.forwarder.traceparent = assignment.traceparent
            await self._make_backend(spec)
            await self._start_backend()
        except Exception as error:  # RestoreFailed, a backend that cannot start, ...
            log.exception("assign_failed")
            self.connection.command_update(
                command.command_id, "failed", error=f"{type(error).__name__}: {error}"[:4096]
            )
            return
        self.connection.command_update(command.command_id, "completed")
        self.connection.announce_ready()
        log.info("assigned", extra={"session_id": spec.session_id})
        # Its input follows within milliseconds: the SDK loads meanwhile, not at the first
        # model call (a driver standing by does not carry it).
        self._prefetch = asyncio.create_task(self._prefetch_sdk(), name="prefetch")

    async def _make_backend(self, spec: ExecutionSpec) -> None:
        spec = await self._open_network(spec)
        self.connection.mask_secrets(
            [spec.environment[name] for name in spec.secret_variables if name in spec.environment]
        )
        backend = create_backend(
            self.payload.runtime, spec, self.connection, gateway_url=self.forwarder.gateway_url
        )
        self.connection.capabilities = list(backend.capabilities)
        self.backend = backend
        self._watcher = asyncio.create_task(self._watch(backend), name="backend-stopped")

    async def _watch(self, backend: Backend) -> None:
        await backend.stopped.wait()
        self.stopped.set()

    async def _open_network(self, spec: ExecutionSpec) -> ExecutionSpec:
        """The run's network, as its tools see it: under `limited` a listener that tunnels to
        control's egress proxy, with the proxy variables pointing at it; under `full` only the
        policy's name (the sandbox has its own route); under `none` nothing at all."""
        extra: dict[str, str] = {"MOSOO_NETWORK_POLICY": spec.network_policy}
        socket_path = egress_socket_for(self.payload.control_url)
        if spec.network_policy == "limited" and socket_path is not None:
            self.egress = EgressForwarder(socket_path, spec.gateway.grant)
            await self.egress.start()
            extra.update(proxy_environment(self.egress.url))
        return spec.model_copy(update={"environment": {**spec.environment, **extra}})
