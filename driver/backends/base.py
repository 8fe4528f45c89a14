"""What every runtime shares: the run lifecycle, command handling, permission prompts and
cancellation. A runtime subclasses `Backend` and implements `execute(run) -> final text`."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import importlib.util
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol

from driver.protocol import Command, ExecutionSpec

log = logging.getLogger("driver.backend")

PERMISSION_DECISIONS = frozenset({"allow_once", "reject_once"})
# How long a cancelled run may take to wind down (kill a tool, close a stream) when we wait for it.
CANCEL_GRACE_SECONDS = 10.0


class EventSink(Protocol):
    """Where a backend sends its events and command updates (the control connection)."""

    def emit(self, run_id: str, kind: str, payload: dict[str, Any] | None = None) -> str: ...

    def command_update(
        self,
        command_id: str,
        status: str,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None: ...


class RunFailure(Exception):
    """Ends a run with `run.failed {code, message, retryable}`."""

    def __init__(self, code: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class InvalidCommand(ValueError):
    """A command this driver cannot carry out; answered with `command_update failed`."""


@dataclass
class RunInput:
    run_id: str
    text: str
    attachments: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _ActiveRun:
    run_id: str
    command_id: str
    task: asyncio.Task[None]
    # Why the run task is being cancelled: None (not cancelled), a user-facing reason, or shutdown.
    cancel_reason: str | None = None
    shutdown: bool = False
    cancel_command_ids: list[str] = field(default_factory=list)


class Backend(abc.ABC):
    """The runtime-independent half of the driver's agent side."""

    runtime: ClassVar[str] = ""
    capabilities: ClassVar[tuple[str, ...]] = ()

    def __init__(self, spec: ExecutionSpec, sink: EventSink) -> None:
        self.spec = spec
        self.sink = sink
        self.workspace = Path(spec.workspace)
        self.stopped = asyncio.Event()  # set after `session.stop` has been carried out
        self._active: _ActiveRun | None = None
        self._permissions: dict[str, tuple[str, asyncio.Future[str]]] = {}
        self._background: set[asyncio.Task[Any]] = set()

    # --- to implement --------------------------------------------------------------------

    async def start(self) -> None:
        """Prepare the runtime (before `ready`); raise to refuse to start. Optional: nothing
        to prepare by default."""
        return None

    @abc.abstractmethod
    async def execute(self, run: RunInput) -> str:
        """Carry out one run and return its final text; raise RunFailure to fail it.
        Cancellation arrives as asyncio.CancelledError and must stop everything at once."""

    async def prepare_checkpoint(self, paths: list[str]) -> dict[str, Any]:
        """Make the workspace consistent on disk before control archives it."""
        await asyncio.to_thread(os.sync)
        return {"synced": True}

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def active_run_id(self) -> str | None:
        if self._active is None or self._active.task.done():
            return None
        return self._active.run_id

    async def close(self) -> None:
        """The driver is going away: end the active run as failed (retryable) and wait for it."""
        active = self._active
        if active is not None and not active.task.done():
            active.shutdown = True
            active.task.cancel()
            await self._wait_run(active)
        for task in list(self._background):
            task.cancel()

    async def handle_command(self, command: Command) -> None:
        """Carry out one command; quick (long work goes to tasks) so the connection reads on."""
        handlers = {
            "input.start": self._on_input_start,
            "turn.cancel": self._on_turn_cancel,
            "permission.resolve": self._on_permission_resolve,
            "session.stop": self._on_session_stop,
            "checkpoint.prepare": self._on_checkpoint_prepare,
        }
        handler = handlers.get(command.kind)
        if handler is None:
            self.sink.command_update(
                command.command_id, "failed", error=f"unknown command kind {command.kind!r}"
            )
            return
        try:
            await handler(command)
        except InvalidCommand as error:
            log.warning(
                "command_refused",
                extra={
                    "command_id": command.command_id,
                    "kind": command.kind,
                    "reason": str(error),
                },
            )
            self.sink.command_update(command.command_id, "failed", error=str(error))

    # --- helpers for runtimes ------------------------------------------------------------

    def emit(self, run_id: str, kind: str, **payload: Any) -> str:
        return self.sink.emit(run_id, kind, payload)

    async def request_permission(
        self, run_id: str, tool_call_id: str, name: str, arguments: Any
    ) -> str:
        """Ask the user (through control) and wait; returns `allow_once` or `reject_once`."""
        request_id = f"perm_{uuid.uuid4().hex}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._permissions[request_id] = (run_id, future)
        self.emit(
            run_id,
            "permission.requested",
            request_id=request_id,
            tool_call_id=tool_call_id,
            name=name,
            input=arguments,
        )
        try:
            decision = await future
        finally:
            self._permissions.pop(request_id, None)
        self.emit(run_id, "permission.resolved", request_id=request_id, decision=decision)
        return decision

    # --- command handlers ----------------------------------------------------------------

    async def _on_input_start(self, command: Command) -> None:
        run = _parse_run_input(command.payload)
        if self.active_run_id is not None:
            raise InvalidCommand(f"run {self.active_run_id} is still active")
        self.sink.command_update(command.command_id, "accepted")
        task = asyncio.create_task(self._run(run, command.command_id), name=f"run-{run.run_id}")
        self._active = _ActiveRun(run_id=run.run_id, command_id=command.command_id, task=task)

    async def _run(self, run: RunInput, command_id: str) -> None:
        log.info("run_started", extra={"run_id": run.run_id})
        self.emit(run.run_id, "run.started")
        status = "completed"
        try:
            final_text = await self.execute(run)
        except asyncio.CancelledError:
            active = self._active
            if active is not None and active.shutdown:
                status = "failed"
                self.emit(
                    run.run_id,
                    "run.failed",
                    code="driver_stopped",
                    message="the driver was stopped during the run",
                    retryable=True,
                )
            else:
                status = "cancelled"
                reason = (
                    active.cancel_reason
                    if active is not None and active.cancel_reason
                    else "cancelled"
                )
                self.emit(run.run_id, "run.cancelled", reason=reason)
        except RunFailure as failure:
            status = "failed"
            self.emit(
                run.run_id,
                "run.failed",
                code=failure.code,
                message=failure.message,
                retryable=failure.retryable,
            )
        except Exception as error:
            status = "failed"
            log.exception("run_crashed", extra={"run_id": run.run_id})
            self.emit(
                run.run_id,
                "run.failed",
                code="driver_error",
                message=f"{type(error).__name__}: {error}",
                retryable=False,
            )
        else:
            self.emit(run.run_id, "run.completed", final_text=final_text)
        finally:
            for request_id, (owner, future) in list(self._permissions.items()):
                if owner == run.run_id:
                    future.cancel()
                    self._permissions.pop(request_id, None)
        log.info("run_finished", extra={"run_id": run.run_id, "status": status})
        self.sink.command_update(command_id, "completed", result={"run_status": status})
        active = self._active
        if active is not None and active.run_id == run.run_id:
            for cancel_id in active.cancel_command_ids:
                self.sink.command_update(
                    cancel_id, "completed", result={"cancelled": status == "cancelled"}
                )

    async def _on_turn_cancel(self, command: Command) -> None:
        run_id = command.payload.get("run_id")
        reason = command.payload.get("reason") or "cancelled by the user"
        active = self._active
        if active is None or active.task.done() or (run_id and run_id != active.run_id):
            self.sink.command_update(
                command.command_id,
                "completed",
                result={"cancelled": False, "reason": "no such active run"},
            )
            return
        self.sink.command_update(command.command_id, "accepted")
        active.cancel_command_ids.append(command.command_id)
        if active.cancel_reason is None:
            active.cancel_reason = str(reason)
            active.task.cancel()

    async def _on_permission_resolve(self, command: Command) -> None:
        request_id = command.payload.get("request_id")
        decision = command.payload.get("decision")
        if decision not in PERMISSION_DECISIONS:
            raise InvalidCommand(f"decision must be one of {sorted(PERMISSION_DECISIONS)}")
        pending = self._permissions.get(request_id) if isinstance(request_id, str) else None
        if pending is None or pending[1].done():
            raise InvalidCommand(f"no pending permission request {request_id!r}")
        pending[1].set_result(decision)
        self.sink.command_update(
            command.command_id, "completed", result={"request_id": request_id, "decision": decision}
        )

    async def _on_session_stop(self, command: Command) -> None:
        self.sink.command_update(command.command_id, "accepted")
        reason = str(command.payload.get("reason") or "session stopped")

        async def stop() -> None:
            active = self._active
            if active is not None and not active.task.done():
                if active.cancel_reason is None:
                    active.cancel_reason = reason
                active.task.cancel()
                await self._wait_run(active)
            self.sink.command_update(command.command_id, "completed", result={"stopped": True})
            log.info("session_stop", extra={"reason": reason})
            self.stopped.set()

        self._spawn(stop())

    async def _on_checkpoint_prepare(self, command: Command) -> None:
        paths = command.payload.get("paths") or []
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise InvalidCommand("paths must be a list of strings")
        self.sink.command_update(command.command_id, "accepted")

        async def prepare() -> None:
            try:
                result = await self.prepare_checkpoint(paths)
            except Exception as error:
                log.exception("checkpoint_prepare_failed")
                self.sink.command_update(
                    command.command_id, "failed", error=f"{type(error).__name__}: {error}"
                )
                return
            self.sink.command_update(
                command.command_id,
                "completed",
                result={**result, "run_active": self.active_run_id is not None},
            )

        self._spawn(prepare())

    # --- internals -----------------------------------------------------------------------

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _wait_run(self, active: _ActiveRun) -> None:
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(active.task), timeout=CANCEL_GRACE_SECONDS)


def require_packages(runtime: str, *packages: str) -> None:
    """Refuse to start without the runtime's packages. They are imported at first use (an
    idle driver does not carry them), so their absence has to show here, not mid-run."""
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(
            f"the {runtime} runtime needs the Python package(s) {', '.join(missing)}, "
            "which this sandbox image does not have"
        )


# One import thread at a time. Two threads importing an SDK at once (a standby driver's
# prefetch and its run's first model call) can each hold a module the other needs; Python's
# import system breaks that deadlock by handing one of them the other's half-initialized
# module ("AttributeError: partially initialized module 'httpx' has no attribute 'Timeout'",
# seen failing a run).
_IMPORTING = threading.Lock()


# The lock orders our own import threads; an import by a thread that does not take it can
# still meet CPython 3.11's import deadlock detection, which hands a waiting thread the
# half-initialized module when it believes two threads wait on each other (3.12 reworked it).
# Python then removes the module that failed and the other import completes, so a second
# import succeeds. (The error CI kept seeing in runs was not this but the OpenAI SDK reading
# `sys.modules["httpx"]` mid-import: see OpenAIBackend._model_client.)
_IMPORT_ATTEMPTS = 3
_IMPORT_RETRY_PAUSE_SECONDS = 0.05


def import_module(name: str) -> ModuleType:
    """`importlib.import_module`, one thread at a time (for a thread: see `import_packages`),
    tried again when another thread's import handed it a half-initialized module."""
    with _IMPORTING:
        for _ in range(_IMPORT_ATTEMPTS - 1):
            try:
                return importlib.import_module(name)
            except (AttributeError, ImportError) as error:
                if not _met_partial_import(error):
                    raise
                log.warning("import_retried", extra={"import": name, "error": str(error)})
                time.sleep(_IMPORT_RETRY_PAUSE_SECONDS)
        return importlib.import_module(name)


def _met_partial_import(error: Exception) -> bool:
    """Python's words for a module that another thread is still initializing."""
    return "partially initialized module" in str(error)


async def import_packages(*modules: str) -> None:
    """Import a runtime's SDK modules in a thread, so the control connection keeps being
    served meanwhile (they take hundreds of milliseconds); quick once they are loaded."""
    for name in modules:
        await asyncio.to_thread(import_module, name)


def _parse_run_input(payload: dict[str, Any]) -> RunInput:
    run_id = payload.get("run_id")
    text = payload.get("text", "")
    attachments = payload.get("attachments") or []
    if not isinstance(run_id, str) or not run_id:
        raise InvalidCommand("input.start needs a run_id")
    if not isinstance(text, str):
        raise InvalidCommand("input.start text must be a string")
    if not isinstance(attachments, list):
        raise InvalidCommand("input.start attachments must be a list")
    items = [item if isinstance(item, dict) else {"path": str(item)} for item in attachments]
    return RunInput(run_id=run_id, text=text, attachments=items)


def user_text(run: RunInput) -> str:
    """The user's message as the model gets it: the text, then the attached files' paths."""
    if not run.attachments:
        return run.text
    lines = [run.text, "", "Attached files (read-only):"]
    for item in run.attachments:
        path = item.get("path") or item.get("mount_path")
        if not path and item.get("file_id") and item.get("name"):
            path = f"/mnt/attachments/{item['file_id']}/{item['name']}"
        details = [str(item[key]) for key in ("mime_type",) if item.get(key)]
        if isinstance(item.get("size"), int):
            details.append(f"{item['size']} bytes")
        lines.append(
            f"- {path or item.get('name', 'unnamed file')}"
            + (f" ({', '.join(details)})" if details else "")
        )
    return "\n".join(lines)
