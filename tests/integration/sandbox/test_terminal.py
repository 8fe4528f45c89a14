"""An owner's terminal (`open_terminal`), against the docker and process backends: a login
shell on a TTY in /workspace as the sandbox user, resized on demand, with no capability and
no privilege; closing it ends every process it started, those that left its session too."""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path

import pytest

from mosoo_core.runtime.sandbox import (
    SANDBOX_UID,
    TERMINAL_MARKER_ENV,
    SandboxBackend,
    SandboxRef,
    TerminalProcess,
)
from tests.support.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CONTROL = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07)")  # CSI and OSC sequences


class Screen:
    """Everything the terminal wrote, read by a thread of its own."""

    def __init__(self, terminal: TerminalProcess) -> None:
        self.terminal = terminal
        self._data = b""
        self._lock = threading.Lock()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while chunk := self.terminal.read():
            with self._lock:
                self._data += chunk
        self.ended.set()

    @property
    def text(self) -> str:
        """What was written, without control sequences and carriage returns."""
        with self._lock:
            text = self._data.decode(errors="replace")
        return CONTROL.sub("", text).replace("\r", "")

    def run(self, command: str, pattern: str) -> re.Match[str]:
        """Type `command`, then wait for `pattern` in what comes back after it."""
        before = len(self.text)
        self.terminal.write(command.encode() + b"\r")
        found: list[re.Match[str]] = []

        def seen() -> bool:
            match = re.search(pattern, self.text[before:])
            if match:
                found.append(match)
            return match is not None

        try:
            wait_for(seen, 30, f"{pattern!r} after {command!r}")
        except TimeoutError:
            raise AssertionError(f"no {pattern!r} after {command!r} in {self.text!r}") from None
        return found[0]


def _marked(terminal_id: str) -> list[int]:
    """Host pids of every process carrying the terminal's marker (the tests run as root, so
    they read every process's environment, a container's included)."""
    wanted = f"{TERMINAL_MARKER_ENV}={terminal_id}".encode()
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if wanted in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
        except OSError:
            continue  # gone meanwhile
    return pids


def _open(backend: SandboxBackend, sandbox: SandboxRef) -> tuple[str, TerminalProcess, Screen]:
    terminal_id = uuid.uuid4().hex
    terminal = backend.open_terminal(
        sandbox, ["bash", "-l"], terminal_id=terminal_id, rows=30, cols=100, env={"TERM": "xterm"}
    )
    return terminal_id, terminal, Screen(terminal)


def test_a_terminal_is_a_login_shell_in_the_workspace_as_the_sandbox_user(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    _, terminal, screen = _open(backend, sandbox)
    try:
        screen.run("echo cwd=$(pwd) uid=$(id -u)", r"cwd=/workspace uid=(\d+)")
        assert screen.run("id -u", r"\n(\d+)\n").group(1) == str(SANDBOX_UID)
        # A TTY (bwrap shows it as /dev/console), not "not a tty".
        assert screen.run("tty", r"\n(/dev/\S+)\n")
        # A login shell: the image's PATH (the driver's commands) came back after /etc/profile.
        assert "/opt/mosoo/bin" in screen.run("echo $PATH", r"\n(/\S+)\n").group(1)
        # Job control works: it is the shell's controlling terminal.
        screen.run("sleep 30 &", r"\[1\] \d+")
        screen.run("jobs", r"\[1\]\+\s+Running\s+sleep 30")

        assert screen.run("stty size", r"\n(\d+ \d+)\n").group(1) == "30 100"
        terminal.resize(41, 123)
        assert screen.run("stty size", r"\n(\d+ \d+)\n").group(1) == "41 123"

        # Nothing the agent's own commands lack: no capability, no way to gain privilege.
        status = screen.run(
            "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status", r"NoNewPrivs:\s+\d"
        )
        text = screen.text[status.start() - 200 :]
        assert re.search(r"CapEff:\s+0{16}", screen.text), text
        assert re.search(r"CapPrm:\s+0{16}", screen.text), text
        assert re.search(r"NoNewPrivs:\s+1", screen.text), text
    finally:
        terminal.close()


def test_closing_a_terminal_ends_every_process_it_started(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    terminal_id, terminal, screen = _open(backend, sandbox)
    try:
        # A background job, a process that left the shell's session, and one left orphaned.
        screen.run("sleep 1001 & setsid sleep 1002 & (sleep 1003 &) ; echo started", "started")
        wait_for(lambda: len(_marked(terminal_id)) >= 4, 30, "the shell and its three sleeps")
    finally:
        began = time.monotonic()
        terminal.close()
    assert screen.ended.wait(30), "the output did not end"
    wait_for(lambda: not _marked(terminal_id), 10, "every process of the terminal to end")
    assert time.monotonic() - began < 15
    terminal.close()  # twice is fine


def test_a_terminal_ends_when_its_shell_exits(backend: SandboxBackend, sandbox: SandboxRef) -> None:
    terminal_id, terminal, screen = _open(backend, sandbox)
    try:
        terminal.write(b"exit 3\r")
        assert screen.ended.wait(30), screen.text
        wait_for(lambda: not _marked(terminal_id), 10, "the shell to be gone")
    finally:
        terminal.close()
