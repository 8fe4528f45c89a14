"""`mosoo-driver`: read and delete the boot payload, start the forwarder, dial control, run
the backend until control stops us. A payload without a run boots a standby driver, which
gets its run from control (`assign`, see driver/slot.py).

Exit codes: 0 stopped normally (`session.stop`, SIGTERM/SIGINT); 1 control closed the
connection with a reason (bad boot token, superseded, ...); 2 no usable boot payload;
3 control unreachable for too long; 4 the backend failed to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from driver import __version__
from driver.protocol import BootPayload

BOOT_PAYLOAD_ENV = "MOSOO_DRIVER_BOOT_PAYLOAD_FILE"
LOG_LEVEL_ENV = "MOSOO_DRIVER_LOG_LEVEL"

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_BAD_PAYLOAD = 2
EXIT_UNREACHABLE = 3
EXIT_BACKEND_FAILED = 4

log = logging.getLogger("driver")

_STANDARD_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
}
_SECRET_MARKERS = ("token", "grant", "authorization", "api_key", "secret", "password")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: at, level, logger, event (the message), then the extra fields.
    Fields whose name looks secret are redacted, as a safety net: we never log them anyway."""

    def __init__(self, context: dict[str, str] | None = None) -> None:
        super().__init__()
        self.context = dict(context or {})

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            **self.context,
        }
        for key, value in vars(record).items():
            if key in _STANDARD_RECORD_FIELDS or key.startswith("_"):
                continue
            line[key] = (
                "[redacted]" if any(marker in key.lower() for marker in _SECRET_MARKERS) else value
            )
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(context: dict[str, str] | None = None) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(context))
    root = logging.getLogger("driver")
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get(LOG_LEVEL_ENV, "INFO").upper())
    root.propagate = False
    return handler


def read_boot_payload(path: Path) -> BootPayload:
    """Read the payload and delete the file at once, whatever it holds (it has a live token)."""
    try:
        raw = path.read_bytes()
    finally:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            # A standby payload the host could not give us (not root): it holds only a
            # single-use boot token, spent at hello, and goes with the sandbox.
            log.warning("boot_payload_not_deleted", extra={"error": type(error).__name__})
    return BootPayload.model_validate_json(raw)


async def run_driver(payload: BootPayload, *, install_signal_handlers: bool = True) -> int:
    from driver.connection import (
        BackendStartFailed,
        ControlConnection,
        ControlLogHandler,
        ControlRejected,
        ControlUnreachable,
    )
    from driver.forwarder import Forwarder
    from driver.slot import BackendSlot

    spec = payload.execution_spec
    if spec is not None and spec.runtime != payload.runtime:
        log.warning(
            "runtime_mismatch",
            extra={"payload_runtime": payload.runtime, "spec_runtime": spec.runtime},
        )
    forwarder = Forwarder(payload.control_url, traceparent=payload.traceparent)
    await forwarder.start()
    connection = ControlConnection(
        control_url=payload.control_url,
        driver_instance_id=payload.driver_instance_id,
        boot_token=payload.boot_token,
        runtime=payload.runtime,
    )
    slot = BackendSlot(payload, connection, forwarder)
    await slot.prepare()
    log_handler = ControlLogHandler(connection)
    log_handler.setFormatter(JsonFormatter())
    logging.getLogger("driver").addHandler(log_handler)

    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    if install_signal_handlers:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, interrupted.set)

    connection_task = asyncio.create_task(connection.run(), name="control-connection")
    stop_tasks = [
        asyncio.create_task(slot.stopped.wait()),
        asyncio.create_task(interrupted.wait()),
    ]
    code = EXIT_OK
    try:
        await asyncio.wait({connection_task, *stop_tasks}, return_when=asyncio.FIRST_COMPLETED)
        if not connection_task.done():
            log.info(
                "driver_stopping",
                extra={"reason": "signal" if interrupted.is_set() else "session.stop"},
            )
            await slot.close()  # a run still active fails as `driver_stopped` (retryable)
            connection.stop()
        try:
            await connection_task
        except ControlRejected as rejected:
            log.error("driver_rejected", extra={"code": rejected.code, "reason": rejected.reason})
            code = EXIT_REJECTED
        except ControlUnreachable as error:
            log.error("control_unreachable", extra={"error": str(error)})
            code = EXIT_UNREACHABLE
        except BackendStartFailed as error:
            log.error("backend_failed", extra={"error": str(error)})
            code = EXIT_BACKEND_FAILED
    finally:
        for task in stop_tasks:
            task.cancel()
        if not connection_task.done():
            connection_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connection_task
        with contextlib.suppress(Exception):
            await slot.close()
        await forwarder.close()
        logging.getLogger("driver").removeHandler(log_handler)
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
    log.info("driver_exit", extra={"exit_code": code})
    return code


def main() -> int:
    configure_logging()
    location = os.environ.get(BOOT_PAYLOAD_ENV)
    if not location:
        log.error("boot_payload_missing", extra={"env": BOOT_PAYLOAD_ENV})
        return EXIT_BAD_PAYLOAD
    try:
        payload = read_boot_payload(Path(location))
    except FileNotFoundError:
        log.error("boot_payload_missing", extra={"path": location})
        return EXIT_BAD_PAYLOAD
    except (OSError, ValidationError) as error:
        # Only the error type: a validation message could quote the token.
        log.error("boot_payload_invalid", extra={"path": location, "error": type(error).__name__})
        return EXIT_BAD_PAYLOAD
    spec = payload.execution_spec
    configure_logging(
        {
            "driver_instance_id": payload.driver_instance_id,
            # A standby driver learns its thread with `assign` (and logs it then).
            "session_id": spec.session_id if spec is not None else "",
            "traceparent": payload.traceparent,
        }
    )
    log.info(
        "driver_starting",
        extra={
            "version": __version__,
            "runtime": payload.runtime,
            "pid": os.getpid(),
            "standby": spec is None,
        },
    )
    return asyncio.run(run_driver(payload))


if __name__ == "__main__":
    sys.exit(main())
