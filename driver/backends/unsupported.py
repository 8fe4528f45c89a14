"""A runtime this driver does not implement.

Choice: the driver still connects (so control sees a live instance and its `hello.runtime`
with no capabilities) and answers every `input.start` with `command_update failed` plus
`run.failed {code: "runtime_unsupported"}`, so the run ends at once with a clear reason
instead of timing out at boot.
"""

from __future__ import annotations

import logging

from driver.backends.base import Backend, InvalidCommand, RunFailure, RunInput, _parse_run_input
from driver.protocol import Command

log = logging.getLogger("driver.backend")


class UnsupportedBackend(Backend):
    capabilities = ()

    def __init__(self, *args: object, runtime: str, supported: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.requested_runtime = runtime
        self.supported = supported

    @property
    def message(self) -> str:
        return f"this driver does not implement the runtime {self.requested_runtime!r} (it implements: {', '.join(self.supported)})"

    async def start(self) -> None:
        log.error(
            "runtime_unsupported",
            extra={"runtime": self.requested_runtime, "supported": self.supported},
        )

    async def execute(self, run: RunInput) -> str:
        # Never reached through input.start (refused below, before a run starts); kept so
        # any other path to a run fails the same clear way.
        raise RunFailure("runtime_unsupported", self.message)

    async def _on_input_start(self, command: Command) -> None:
        try:
            run = _parse_run_input(command.payload)
        except InvalidCommand:
            raise InvalidCommand(self.message) from None
        self.emit(
            run.run_id,
            "run.failed",
            code="runtime_unsupported",
            message=self.message,
            retryable=False,
        )
        self.sink.command_update(command.command_id, "failed", error=self.message)
