"""The owner's terminal into a running Assistant's (Pet's) sandbox.

A shell (`bash -l`) on a TTY in `/workspace`, as the sandbox user with the sandbox's own
environment, limits and network: what the agent's own bash tool could do, nothing more (no
secret, no capability, no privilege of its own). At most `MAX_TERMINALS_PER_AGENT` are open
at once per Agent, counted in Redis so every web process sees the same count; a slot is a
lease the holder renews, so a process that dies frees its slots by itself. Every open (and
every refused open) and every close is a line of the Agent's Logs, beside the sandbox
operations (`pet_operations.record_operation`). Closing ends the shell and every process it
started. Off with MOSOO_TERMINAL_ENABLED=false.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import redis

from mosoo_core import streams
from mosoo_core.db import session_scope
from mosoo_core.errors import Conflict, Forbidden, InvalidInput, MosooError, NotFound
from mosoo_core.ids import new_id
from mosoo_core.logs import get_logger
from mosoo_core.runtime import pets
from mosoo_core.runtime.pet_operations import pet_agent, record_operation
from mosoo_core.runtime.sandbox import (
    SandboxBackend,
    SandboxError,
    SandboxRef,
    TerminalProcess,
    get_backend,
)
from mosoo_core.settings import get_settings

log = get_logger(__name__)

MAX_TERMINALS_PER_AGENT = 4
MAX_ROWS, MAX_COLS = 500, 1000
SHELL = ["bash", "-l"]
# xterm.js speaks xterm with 256 colours and true colour.
TERMINAL_ENV = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
# A slot not renewed for this long is free again (its web process died with it open).
LEASE_SECONDS = 90
RENEW_SECONDS = 30
OPENED, CLOSED = "terminal open", "terminal close"  # the Logs' operation names

# KEYS[1] the Agent's slots (a sorted set: terminal id -> lease end); ARGV: now, the cap, the
# new lease's end, the terminal's id. Drops expired leases, then takes a slot if one is free.
_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


def _slots_key(agent_id: str) -> str:
    return f"terminal:slots:{agent_id}"


@dataclass(frozen=True)
class TerminalSize:
    rows: int
    cols: int

    @classmethod
    def checked(cls, rows: object, cols: object) -> TerminalSize:
        """InvalidInput unless both are whole numbers within the bounds."""
        for name, value, most in (("rows", rows, MAX_ROWS), ("cols", cols, MAX_COLS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise InvalidInput(f"{name} must be a whole number from 1 to {most}.", field=name)
        assert isinstance(rows, int) and isinstance(cols, int)
        return cls(rows=rows, cols=cols)


class Terminal:
    """One open terminal. `read` blocks (one thread reads); `write`, `resize`, `renew` and
    `close` may come from others. Close it whatever happens: that ends its processes, frees
    its slot and records the close."""

    def __init__(
        self,
        terminal_id: str,
        account_id: str,
        agent_id: str,
        process: TerminalProcess,
        started: float,
    ) -> None:
        self.id, self.account_id, self.agent_id = terminal_id, account_id, agent_id
        self._process = process
        self._started = started
        self._closing = threading.Lock()
        self._closed = False

    def read(self) -> bytes:
        """Output as it comes; b"" once the shell has ended."""
        return self._process.read()

    def write(self, data: bytes) -> None:
        """Keystrokes; Conflict when the shell has ended."""
        try:
            self._process.write(data)
        except SandboxError as error:
            raise Conflict("The terminal has ended.") from error

    def resize(self, size: TerminalSize) -> None:
        try:
            self._process.resize(size.rows, size.cols)
        except SandboxError as error:
            raise Conflict("The terminal has ended.") from error

    def renew(self) -> None:
        """Keep the slot (call every RENEW_SECONDS); a failure is logged, not raised."""
        try:
            streams.sync_client().zadd(
                _slots_key(self.agent_id), {self.id: time.time() + LEASE_SECONDS}, xx=True
            )
        except redis.RedisError as error:
            log.warning("terminal.renew_failed", terminal_id=self.id, error=type(error).__name__)

    def close(self, reason: str = "") -> None:
        """End the shell and everything it started, free the slot, and record the close
        (`reason`: why, when it did not end as the owner meant it to). Twice is fine."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        error = ""
        try:
            self._process.close()
        except SandboxError as failure:  # its processes may live on: say so in the Logs
            error = f"Its processes could not be ended: {failure.message[:300]}"
            log.warning("terminal.close_failed", terminal_id=self.id, error=failure.message[:300])
        finally:
            _release(self.agent_id, self.id)
        record_operation(
            self.account_id,
            self.agent_id,
            CLOSED,
            "failed" if error else "done",
            error or reason,
            self._started,
        )
        log.info("terminal.closed", terminal_id=self.id, agent_id=self.agent_id, reason=reason)


def has_open_terminal(agent_id: str, client: redis.Redis | None = None) -> bool:
    """Whether a terminal of the Agent holds a live lease (what keeps an Assistant awake)."""
    client = client or streams.sync_client()
    return bool(client.zcount(_slots_key(agent_id), time.time(), "+inf"))


def _claim(agent_id: str, terminal_id: str) -> bool:
    now = time.time()
    try:
        taken = streams.sync_client().eval(
            _CLAIM,
            1,
            _slots_key(agent_id),
            now,
            MAX_TERMINALS_PER_AGENT,
            now + LEASE_SECONDS,
            terminal_id,
            LEASE_SECONDS * 2,
        )
    except redis.RedisError as error:
        log.warning("terminal.claim_failed", agent_id=agent_id, error=type(error).__name__)
        raise Conflict("The terminal is unavailable right now (Redis cannot be reached).") from None
    return bool(taken)


def _release(agent_id: str, terminal_id: str) -> None:
    try:
        streams.sync_client().zrem(_slots_key(agent_id), terminal_id)
    except redis.RedisError as error:  # the lease runs out by itself
        log.warning("terminal.release_failed", terminal_id=terminal_id, error=type(error).__name__)


def _running_sandbox(backend: SandboxBackend, agent_id: str) -> SandboxRef:
    refs = [ref for ref in pets.pet_sandboxes(backend, agent_id) if ref.state == "running"]
    if not refs:
        raise Conflict(
            "The sandbox is not running: wake it, or send a message, then open the terminal."
        )
    return refs[0]


def check_enabled() -> None:
    """Forbidden when this installation turned the terminal off."""
    if not get_settings().terminal_enabled:
        raise Forbidden("The terminal is turned off on this installation.")


def open_terminal(
    account_id: str, agent_id: str, size: TerminalSize, backend: SandboxBackend | None = None
) -> Terminal:
    """Open a shell in the Agent's running sandbox. Forbidden when the terminal is off;
    NotFound for another owner's Agent (nothing recorded); Conflict for a Task, when the
    sandbox is not running, when MAX_TERMINALS_PER_AGENT are open already, or when the
    sandbox cannot start one (each recorded as refused or failed). Takes a moment (an exec in
    the sandbox): call it from a worker thread."""
    check_enabled()
    started = time.monotonic()
    with session_scope() as db:
        try:
            pet_agent(db, account_id, agent_id)
        except NotFound:
            # One answer whether the id is unknown or another owner's (whose App it names).
            raise NotFound("Agent not found.") from None
    terminal_id = new_id()
    sandbox = backend or get_backend()
    claimed = False
    try:
        ref = _running_sandbox(sandbox, agent_id)
        if not _claim(agent_id, terminal_id):
            raise Conflict(
                f"At most {MAX_TERMINALS_PER_AGENT} terminals may be open on one Assistant: "
                "close one first."
            )
        claimed = True
        process = sandbox.open_terminal(
            ref,
            SHELL,
            terminal_id=terminal_id,
            rows=size.rows,
            cols=size.cols,
            env=TERMINAL_ENV,
        )
    except SandboxError as error:
        _release(agent_id, terminal_id)
        record_operation(account_id, agent_id, OPENED, "failed", error.message, started)
        raise Conflict(f"The terminal could not be opened: {error.message[:300]}") from None
    except MosooError as error:
        if claimed:
            _release(agent_id, terminal_id)
        record_operation(account_id, agent_id, OPENED, "refused", error.message, started)
        raise
    record_operation(account_id, agent_id, OPENED, "done", "", started)
    log.info("terminal.opened", terminal_id=terminal_id, agent_id=agent_id, sandbox=ref.name)
    return Terminal(terminal_id, account_id, agent_id, process, time.monotonic())
