"""The sandbox contract every backend implements (ARCHITECTURE.md section 4).

A sandbox is one isolated place where a driver runs: `/workspace` (writable, the working
directory), `/tmp` (scratch), `/run/mosoo/control/control.sock` (the only way out when the
network policy is `none`), `/run/mosoo/boot` (the one-time boot payload, readable only by the
sandbox user) and read-only mounts for attachments and skills. Every process in it runs as
the unprivileged sandbox user (uid 10001).
"""

from __future__ import annotations

import abc
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Literal

from mosoo_core.errors import MosooError

SANDBOX_UID = 10001
SANDBOX_GID = 10001
SANDBOX_USER = "mosoo"
WORKSPACE = "/workspace"
# PROTOCOL.md names `/run/mosoo/control.sock`; we deviate on purpose. The socket's host
# DIRECTORY is bind-mounted (read-only) at CONTROL_DIR, not the socket file itself: a
# restarted control unlinks and re-creates its socket, and a file bind mount would keep the
# dead inode, so running sandboxes could never reconnect. Through a directory mount they see
# the new socket under the same name.
CONTROL_DIR = "/run/mosoo/control"
CONTROL_SOCKET_NAME = "control.sock"
CONTROL_SOCKET = f"{CONTROL_DIR}/{CONTROL_SOCKET_NAME}"
# What a driver dials (its boot payload's `control_url`): the socket above, inside the
# sandbox. Not PROTOCOL.md's /run/mosoo/control.sock (see CONTROL_DIR).
CONTROL_URL = f"unix://{CONTROL_SOCKET}"
BOOT_DIR = "/run/mosoo/boot"
BOOT_PAYLOAD = "/run/mosoo/boot/payload.json"
# Where a driver started with its sandbox (`create_with_driver`) finds its standby payload,
# when the backend puts it there from the host before the sandbox starts.
STANDBY_DIR = "/run/mosoo/standby"
ATTACHMENTS_DIR = "/mnt/attachments"
# By its full path: an environment layer's bin directories come first on the PATH, and a
# package there must not be able to stand in for the driver.
DRIVER_COMMAND = "/opt/mosoo/bin/mosoo-driver"
BOOT_PAYLOAD_ENV = "MOSOO_DRIVER_BOOT_PAYLOAD_FILE"
# Inside every sandbox (and its login shells, through /etc/profile.d/mosoo.sh): an
# environment's packages (/opt/mosoo/env, mounted only when it has some; a missing directory
# is skipped), the driver's commands and virtualenv, Node.js and npm, then the system. The
# same list as driver/Dockerfile's ENV PATH.
SANDBOX_PATH = (
    "/opt/mosoo/env/python/bin:/opt/mosoo/env/node/node_modules/.bin:/opt/mosoo/bin:"
    "/opt/mosoo/venv/bin:/opt/mosoo/node/bin:/opt/mosoo/opencode/bin:/usr/local/sbin:"
    "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

LABEL_SANDBOX = "mosoo.sandbox"  # "1" on everything a backend creates; what GC lists
LABEL_SUBJECT = "mosoo.subject"
LABEL_APP = "mosoo.app"
LABEL_DRIVER_INSTANCE = "mosoo.driver_instance"

NetworkPolicy = Literal["none", "full"]
# Exec output kept in memory; beyond it the tail is dropped and `truncated` is set.
MAX_EXEC_OUTPUT_BYTES = 16 * 1024 * 1024
# Files streamed into a sandbox or out of it move in chunks of this size.
CHUNK_BYTES = 64 * 1024

TarData = bytes | Iterable[bytes] | BinaryIO


class SandboxError(MosooError):
    code = "sandbox_error"


class SandboxNotFound(SandboxError):
    code = "not_found"


@dataclass(frozen=True)
class Mount:
    """A host path shown inside the sandbox; read-only unless said otherwise."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Limits left as None take the backend's defaults (settings)."""

    subject: str  # "agent:{id}" (Pet) or "session:{id}" (Cattle)
    app_id: str
    driver_instance_id: str = ""
    # Host path of control's socket, named control.sock in a directory of its own: that
    # directory is bind-mounted read-only at /run/mosoo/control (see CONTROL_DIR).
    control_socket: Path | None = None
    mounts: tuple[
        Mount, ...
    ] = ()  # attachments (/mnt/attachments/...), skills (/opt/mosoo/skills/...)
    memory_mb: int | None = None
    cpus: float | None = None
    pids_limit: int | None = None
    network: NetworkPolicy = "none"
    env: Mapping[str, str] = field(default_factory=dict)  # set for every process in the sandbox
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels, e.g. mosoo.test=1

    def all_labels(self) -> dict[str, str]:
        return {
            **self.labels,
            LABEL_SANDBOX: "1",
            LABEL_SUBJECT: self.subject,
            LABEL_APP: self.app_id,
            LABEL_DRIVER_INSTANCE: self.driver_instance_id,
        }


def control_socket_dir(spec: SandboxSpec) -> Path | None:
    """The host directory to mount at CONTROL_DIR for `spec`, after checking the socket."""
    socket = spec.control_socket
    if socket is None:
        return None
    if socket.name != CONTROL_SOCKET_NAME:
        raise SandboxError(
            f"the control socket must be named {CONTROL_SOCKET_NAME}, not {socket.name}"
        )
    if not socket.exists():
        raise SandboxError(f"the control socket {socket} does not exist")
    return socket.parent


def remove_read_only_tree(path: Path) -> None:
    """Delete a folder of read-only files in read-only folders (attachments), as their owner:
    each folder is made writable again before its entries go."""

    def allow_and_retry(function: object, failed: str, _: object) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        function(failed)  # type: ignore[operator]

    if path.is_dir() and not path.is_symlink():
        os.chmod(path, 0o700)
        shutil.rmtree(path, onerror=allow_and_retry)
    elif path.exists() or path.is_symlink():
        path.unlink()


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 1024
    cpus: float = 1.0
    pids_limit: int = 256

    def apply(self, spec: SandboxSpec) -> Limits:
        return Limits(
            memory_mb=spec.memory_mb or self.memory_mb,
            cpus=spec.cpus or self.cpus,
            pids_limit=spec.pids_limit or self.pids_limit,
        )


@dataclass(frozen=True)
class SandboxRef:
    """A handle on one sandbox. `state` is a snapshot taken when the ref was made."""

    backend: str
    id: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    state: str = "running"


@dataclass(frozen=True)
class SandboxStats:
    """What a sandbox uses now, for the Agent's Sandbox panel. None: the backend cannot tell
    (the process backend without a cgroup of its own)."""

    started_at: datetime | None
    image: str  # what it was made from ("" when not an image)
    cpu_percent: float | None  # of one CPU, over about the last second
    memory_bytes: int | None  # resident, page cache left out where the backend can
    memory_limit_bytes: int | None


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


# Every process of an owner's terminal carries this variable (its value the terminal's id), so
# closing the terminal finds and ends them all, those that left its session too.
TERMINAL_MARKER_ENV = "MOSOO_TERMINAL_ID"
# Ends every process of the sandbox user that carries `MOSOO_TERMINAL_ID=$1` in its
# environment; a few rounds, for children forked while the previous round was killing.
TERMINAL_KILL_SCRIPT = (
    'for round in 1 2 3 4 5; do found=""; for dir in /proc/[0-9]*; do '
    'pid="${dir#/proc/}"; [ "$pid" = "$$" ] && continue; '
    'if tr "\\000" "\\n" < "$dir/environ" 2>/dev/null | grep -qxF "$2=$1"; then '
    'kill -KILL "$pid" 2>/dev/null && found=1; fi; done; [ -z "$found" ] && break; done; exit 0'
)


class TerminalProcess(abc.ABC):
    """An interactive shell on a TTY inside a sandbox, as the sandbox user (an owner's
    terminal). `read` and `write` block; one thread reads while others write or resize."""

    @abc.abstractmethod
    def read(self) -> bytes:
        """What the shell wrote since the last read (blocks until there is some); b"" once
        the shell has ended."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Keystrokes (or pasted text) for the shell."""

    @abc.abstractmethod
    def resize(self, rows: int, cols: int) -> None:
        """Set the TTY's size; the shell gets SIGWINCH."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the shell and every process it started. Closing twice is fine."""


class SandboxBackend(abc.ABC):
    """Create, use and destroy sandboxes. Both backends pass tests/integration/sandbox."""

    name: str
    limits: Limits

    @abc.abstractmethod
    def create(self, spec: SandboxSpec) -> SandboxRef:
        """Create and start a sandbox with an empty /workspace."""

    @abc.abstractmethod
    def exec(
        self,
        ref: SandboxRef,
        argv: list[str],
        *,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str = WORKSPACE,
        timeout: float | None = None,
        stdin: TarData | None = None,
    ) -> ExecResult:
        """Run a command to completion as the sandbox user and return its exit code and
        output (each stream kept up to 16 MiB). Whatever the command left running in the
        background is killed when it ends; on timeout the command and everything it started
        is killed and `timed_out` is set. `stdin` may be bytes, a binary file or chunks."""

    @abc.abstractmethod
    def start_process(
        self,
        ref: SandboxRef,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        workdir: str = WORKSPACE,
    ) -> None:
        """Start a long-running command detached (it lives until it exits or `stop`)."""

    def start_driver(self, ref: SandboxRef, payload_path: str = BOOT_PAYLOAD) -> None:
        """Start `mosoo-driver`, which reads (and deletes) the boot payload at payload_path."""
        self.start_process(ref, [DRIVER_COMMAND], env={BOOT_PAYLOAD_ENV: payload_path})

    def create_with_driver(self, spec: SandboxSpec, payload: bytes) -> SandboxRef:
        """Create a sandbox whose driver starts with it, booting from `payload`: a standby
        boot payload (a single-use boot token, never a run's secrets: those come with
        `assign` over the control connection). This default writes the payload into the new
        sandbox and starts the driver; a backend that can start it with the sandbox does."""
        ref = self.create(spec)
        try:
            self.put_file(ref, BOOT_PAYLOAD, payload, mode=0o600)
            self.start_driver(ref)
        except SandboxError:
            self.remove(ref)
            raise
        return ref

    def put_file(self, ref: SandboxRef, path: str, data: bytes, mode: int = 0o600) -> None:
        """Write one file as the sandbox user, created with `mode` (never wider on the way)."""
        script = 'umask 077 && cat > "$1" && chmod "$2" "$1"'
        result = self.exec(
            ref, ["sh", "-c", script, "sh", path, format(mode, "o")], stdin=data, timeout=60
        )
        if result.exit_code != 0:
            raise SandboxError(f"could not write {path}: {result.stderr_text.strip()[:500]}")

    def get_archive(self, ref: SandboxRef, path: str = WORKSPACE) -> Iterator[bytes]:
        """A tar stream of the contents of directory `path` (member names relative to it),
        read inside the sandbox as the sandbox user. Raises SandboxError at the end of the
        stream if tar failed, so a broken checkpoint is never taken for a good one."""
        return self._stream_out(ref, ["tar", "-C", path, "-cf", "-", "."])

    def put_archive(self, ref: SandboxRef, path: str, tar: TarData) -> None:
        """Extract a tar stream (as made by get_archive) into directory `path`, inside the
        sandbox as the sandbox user, so a hostile archive cannot write outside it."""
        script = 'mkdir -p "$1" && tar -C "$1" -xf - --no-same-owner --delay-directory-restore'
        result = self.exec(ref, ["sh", "-c", script, "sh", path], stdin=tar, timeout=600)
        if result.exit_code != 0:
            raise SandboxError(f"could not extract into {path}: {result.stderr_text.strip()[:500]}")

    def attachments_dir(self, ref: SandboxRef) -> Path:
        """The host folder every process of `ref` sees read-only at ATTACHMENTS_DIR. The
        worker writes attachments there directly: the sandbox user can read them but never
        change them, and a running (Pet) sandbox sees new ones without a new mount."""
        raise SandboxError(f"the {self.name} backend has no attachments folder for {ref.name}")

    @abc.abstractmethod
    def _stream_out(self, ref: SandboxRef, argv: list[str]) -> Iterator[bytes]:
        """Run argv and yield its stdout as it comes; raise SandboxError if it fails."""

    @abc.abstractmethod
    def open_terminal(
        self,
        ref: SandboxRef,
        argv: list[str],
        *,
        terminal_id: str,
        rows: int,
        cols: int,
        env: Mapping[str, str] | None = None,
    ) -> TerminalProcess:
        """Start argv (a shell) on a new TTY of `rows` x `cols` in /workspace, as the sandbox
        user with the sandbox's own environment, limits and network, and no capability a
        command run by `exec` lacks. Every process it starts carries TERMINAL_MARKER_ENV =
        `terminal_id`, which is how `close` finds them."""

    @abc.abstractmethod
    def start(self, ref: SandboxRef) -> None:
        """Start a stopped sandbox again (its /workspace is kept)."""

    @abc.abstractmethod
    def stop(self, ref: SandboxRef, timeout: float = 5) -> None:
        """Stop every process of the sandbox; /workspace is kept until remove."""

    @abc.abstractmethod
    def remove(self, ref: SandboxRef) -> None:
        """Stop and delete the sandbox and its /workspace. Removing twice is fine."""

    @abc.abstractmethod
    def list_by_label(self, labels: Mapping[str, str] | None = None) -> list[SandboxRef]:
        """Every sandbox of this backend whose labels include `labels`."""

    @abc.abstractmethod
    def stats(self, ref: SandboxRef) -> SandboxStats:
        """When the sandbox started and what it uses now (takes about a second: CPU use is
        measured between two samples). SandboxNotFound when it is gone."""

    @abc.abstractmethod
    def describe_enforcement(self) -> dict[str, str]:
        """What is enforced and how, for `mosoo doctor` and the tests."""

    def image_name(self) -> str:
        """What a new sandbox starts from, for a run's diagnostics ("" when not an image)."""
        return ""
