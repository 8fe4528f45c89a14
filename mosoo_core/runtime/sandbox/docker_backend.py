"""Sandboxes as Docker containers (the `docker` SDK), hardened as ARCHITECTURE.md section 4 says.

One container per sandbox, running `sleep infinity` under Docker's init so it stays up
between commands; a named volume per sandbox holds /workspace (it survives stop/start and is
deleted with the sandbox). Commands run with `docker exec`; files and archives move through
exec stdin/stdout, so they also reach tmpfs paths (/run/mosoo/boot) and are always written
by the sandbox user inside its own mount namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
from docker import errors as docker_errors
from docker.types import LogConfig, Ulimit
from docker.types import Mount as DockerMount

from mosoo_core.ids import new_id
from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox._base import (
    ATTACHMENTS_DIR,
    BOOT_DIR,
    BOOT_PAYLOAD_ENV,
    CONTROL_DIR,
    DRIVER_COMMAND,
    LABEL_SANDBOX,
    SANDBOX_GID,
    SANDBOX_PATH,
    SANDBOX_UID,
    STANDBY_DIR,
    TERMINAL_KILL_SCRIPT,
    TERMINAL_MARKER_ENV,
    WORKSPACE,
    ExecResult,
    Limits,
    SandboxBackend,
    SandboxError,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    SandboxStats,
    TarData,
    TerminalProcess,
    control_socket_dir,
    remove_read_only_tree,
)
from mosoo_core.runtime.sandbox._streams import CappedBuffer, iter_chunks
from mosoo_core.runtime.sandbox.image import ensure_sandbox_image

log = get_logger("mosoo.sandbox.docker")

_STDOUT, _STDERR = 1, 2
# Runs an exec'd command in its own process group and kills what is left of that group when
# it ends, so background children never outlive the call (as in the process backend, where
# the command's pid namespace ends with it). fd 3 carries stdin past the `&`, which would
# otherwise read from /dev/null.
_EXEC_WRAPPER = (
    'exec 3<&0; setsid "$@" <&3 3<&- & pid=$!; exec 3<&-; '
    'wait "$pid"; code=$?; kill -9 -"$pid" 2>/dev/null; exit "$code"'
)
# How long past its own timeout an exec may take before we stop waiting for it.
_EXEC_GRACE_SECONDS = 10.0


def _parse_engine_time(value: str) -> datetime:
    # The engine writes nanoseconds (2026-12-01T23:58:16.123456789Z); Python takes micro.
    head, _, fraction = value.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(fraction or '0')[:6]:0<6}+00:00")


def _cpu_percent(sample: dict[str, Any]) -> float | None:
    """Of one CPU, as `docker stats` computes it: container time over host time, per CPU."""
    now, before = sample.get("cpu_stats") or {}, sample.get("precpu_stats") or {}
    try:
        used = now["cpu_usage"]["total_usage"] - before["cpu_usage"]["total_usage"]
        elapsed = now["system_cpu_usage"] - before["system_cpu_usage"]
    except (KeyError, TypeError):
        return None  # a stopped container, or an engine that gave one sample only
    cpus = now.get("online_cpus") or len(now["cpu_usage"].get("percpu_usage") or [1])
    return round(used / elapsed * cpus * 100, 2) if elapsed > 0 else 0.0


def _memory_bytes(sample: dict[str, Any]) -> int | None:
    memory = sample.get("memory_stats") or {}
    if "usage" not in memory:
        return None
    details = memory.get("stats") or {}
    # What `docker stats` shows: page cache left out (cgroup v1 "total_inactive_file", v2 "inactive_file").
    cache = details.get("total_inactive_file", details.get("inactive_file", 0))
    return int(memory["usage"]) - int(cache)


_STANDBY_FILE = "payload.json"


def _write_standby_payload(folder: Path, payload: bytes) -> None:
    """The standby payload (a boot token, single-use and bound to its driver), in a folder
    the sandbox user owns when we can give it (as root): the driver deletes it once read.
    Otherwise it stays readable (0644) until the sandbox goes: the token is spent at hello."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _STANDBY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(payload)
    try:
        os.chown(folder, SANDBOX_UID, SANDBOX_GID)
        os.chown(path, SANDBOX_UID, SANDBOX_GID)
        folder.chmod(0o700)
    except PermissionError:
        folder.chmod(0o755)
        path.chmod(0o644)


def _workspace_volume(name: str) -> str:
    return f"{name}-workspace"


@contextlib.contextmanager
def _engine_errors(what: str) -> Iterator[None]:
    """Docker's own exceptions, as the typed errors every backend raises."""
    try:
        yield
    except docker_errors.NotFound as error:
        raise SandboxNotFound(f"{what}: {error.explanation or error}") from error
    except docker_errors.DockerException as error:
        explanation = getattr(error, "explanation", None) or error
        raise SandboxError(f"{what}: {explanation}") from error
    except OSError as error:  # the engine's socket itself (connection refused, reset)
        raise SandboxError(f"{what}: {error}") from error


class _Hijacked:
    """The raw, bidirectional connection of one `docker exec` (stdin in, frames out; with
    `tty`, the TTY's bytes as they come, unframed)."""

    def __init__(self, api: docker.APIClient, exec_id: str, tty: bool = False) -> None:
        # exec_start(socket=True) hands back the socket *below* the HTTP reader, which can lose
        # output already buffered while the 101 headers were parsed; read through the reader.
        response = api._post_json(
            api._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": tty, "Detach": False},
            stream=True,
        )
        api._raise_for_status(response)
        self._response = response
        self.reader = response.raw._fp.fp  # BufferedReader over the connection
        raw = self.reader.raw
        self.sock: socket.socket = getattr(raw, "_sock", raw)

    def send_all(self, data: TarData) -> None:
        try:
            for chunk in iter_chunks(data):
                self.sock.sendall(chunk)
        except OSError:
            pass  # the command exited without reading everything; its exit code says why
        finally:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def frames(self, deadline: float | None) -> Iterator[tuple[int, bytes]]:
        """(stream, chunk) until the command closes its output; TimeoutError past deadline."""
        while True:
            header = self._read_exactly(8, deadline)
            if header is None:
                return
            stream, size = struct.unpack(">BxxxL", header)
            while size > 0:
                chunk = self._read_some(min(size, 65536), deadline)
                if not chunk:
                    return
                size -= len(chunk)
                yield stream, chunk

    def _settimeout(self, deadline: float | None) -> None:
        if deadline is None:
            self.sock.settimeout(None)
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)

    def _read_some(self, size: int, deadline: float | None) -> bytes:
        self._settimeout(deadline)
        return bytes(self.reader.read1(size))  # TimeoutError past the deadline

    def _read_exactly(self, size: int, deadline: float | None) -> bytes | None:
        data = b""
        while len(data) < size:
            chunk = self._read_some(size - len(data), deadline)
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sock.close()
        with contextlib.suppress(Exception):
            self._response.close()


class _DockerTerminal(TerminalProcess):
    """A `docker exec` with a TTY; closing it ends its processes with an exec of their own
    (the engine has no way to kill an exec, and dropping its connection leaves it running)."""

    def __init__(
        self, backend: DockerBackend, ref: SandboxRef, exec_id: str, terminal_id: str
    ) -> None:
        self._backend, self._ref, self._exec_id = backend, ref, exec_id
        self._terminal_id = terminal_id
        with _engine_errors(f"could not open a terminal in {ref.name}"):
            self._connection = _Hijacked(backend.client.api, exec_id, tty=True)
        self._connection.sock.settimeout(None)
        self._closed = threading.Event()

    def read(self) -> bytes:
        try:
            return bytes(self._connection.reader.read1(65536))
        except (OSError, ValueError):  # closed under us: the terminal is over
            return b""

    def write(self, data: bytes) -> None:
        try:
            self._connection.sock.sendall(data)
        except OSError as error:
            raise SandboxError(f"the terminal in {self._ref.name} is gone: {error}") from error

    def resize(self, rows: int, cols: int) -> None:
        with _engine_errors(f"could not resize the terminal in {self._ref.name}"):
            self._backend.client.api.exec_resize(self._exec_id, height=rows, width=cols)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._backend.end_terminal_processes(self._ref, self._terminal_id)
        finally:
            with contextlib.suppress(OSError):
                self._connection.sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read
            self._connection.close()


class DockerBackend(SandboxBackend):
    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        image: str = "",
        base_image: str = "",
        limits: Limits | None = None,
        attachments_root: Path | None = None,
    ) -> None:
        """attachments_root: where each sandbox's attachments folder lives on this host (it is
        bind-mounted read-only at /mnt/attachments, like the control socket's folder, so the
        engine must share this host's filesystem); None: no attachments folder."""
        self.client = client or docker.from_env(timeout=120)
        self.attachments_root = attachments_root.resolve() if attachments_root else None
        # Beside it: the folder a driver started with its sandbox boots from (STANDBY_DIR).
        self.standby_root = (
            self.attachments_root.parent / "sandbox-standby" if self.attachments_root else None
        )
        self.limits = limits or Limits()
        self._image = image
        self._base_image = base_image
        self._image_lock = threading.Lock()

    # --- image -----------------------------------------------------------------------------

    @property
    def image(self) -> str:
        """The sandbox image; built from driver/Dockerfile (cached by content) on first use."""
        with self._image_lock:
            if not self._image:
                self._image = ensure_sandbox_image(self.client, base_image=self._base_image)
            return self._image

    def image_name(self) -> str:
        return self.image

    # --- lifecycle -------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> SandboxRef:
        return self._create(spec, None)

    def create_with_driver(self, spec: SandboxSpec, payload: bytes) -> SandboxRef:
        """The driver is the container's own first process, started with it: no exec to write
        the payload and none to start the driver (each a round trip to the engine). The
        standby payload waits in a host folder mounted at STANDBY_DIR, as attachments do."""
        if self.standby_root is None:
            return super().create_with_driver(spec, payload)
        return self._create(spec, payload)

    def _create(self, spec: SandboxSpec, standby_payload: bytes | None) -> SandboxRef:
        limits = self.limits.apply(spec)
        labels = spec.all_labels()
        name = f"mosoo-{new_id().lower()}"
        image = self.image
        command = ["sleep", "infinity"]
        environment = {"HOME": WORKSPACE, "PATH": SANDBOX_PATH, **spec.env}
        mounts = [DockerMount(WORKSPACE, _workspace_volume(name), type="volume")]
        if standby_payload is not None:
            folder = self._standby_host_dir(name)
            assert folder is not None
            _write_standby_payload(folder, standby_payload)
            mounts.append(DockerMount(STANDBY_DIR, str(folder), type="bind"))
            environment[BOOT_PAYLOAD_ENV] = f"{STANDBY_DIR}/{_STANDBY_FILE}"
            # The driver, then the same `sleep` as any sandbox: the container outlives its
            # driver, so a run's outputs and checkpoint are still read after it ends.
            command = ["sh", "-c", f"{DRIVER_COMMAND} & exec sleep infinity"]
        control_dir = control_socket_dir(spec)
        if control_dir is not None:
            # The socket's directory, not the socket: it survives control restarts (_base.py).
            mounts.append(DockerMount(CONTROL_DIR, str(control_dir), type="bind", read_only=True))
        for mount in spec.mounts:
            mounts.append(
                DockerMount(mount.target, str(mount.source), type="bind", read_only=mount.read_only)
            )
        attachments = self._attachments_host_dir(name)
        if attachments is not None and not any(
            m.target.startswith(ATTACHMENTS_DIR) for m in spec.mounts
        ):
            # A host folder, not a tmpfs: attachments would count against the sandbox's memory.
            attachments.mkdir(parents=True, exist_ok=True)
            attachments.chmod(0o755)  # whatever the umask: the sandbox user must read it
            mounts.append(
                DockerMount(ATTACHMENTS_DIR, str(attachments), type="bind", read_only=True)
            )
        memory = f"{limits.memory_mb}m"
        with _engine_errors("could not create the workspace volume"):
            self.client.volumes.create(name=_workspace_volume(name), labels=labels)
        try:
            container = self.client.containers.run(
                image,
                command,
                name=name,
                hostname="sandbox",
                detach=True,
                user=f"{SANDBOX_UID}:{SANDBOX_GID}",
                working_dir=WORKSPACE,
                environment=environment,
                # What the driver prints when it starts with the container; bounded.
                log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
                labels=labels,
                init=True,
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                pids_limit=limits.pids_limit,
                mem_limit=memory,
                memswap_limit=memory,  # the same figure: no swap on top
                nano_cpus=int(limits.cpus * 1e9),
                ulimits=[Ulimit(name="nofile", soft=8192, hard=8192)],
                network_mode="none" if spec.network == "none" else "bridge",
                mounts=mounts,
                tmpfs={
                    "/tmp": f"rw,nosuid,nodev,size={limits.memory_mb}m,mode=1777",
                    BOOT_DIR: f"rw,nosuid,nodev,noexec,size=1m,uid={SANDBOX_UID},gid={SANDBOX_GID},mode=0700",
                },
            )
        except docker_errors.DockerException as error:
            with contextlib.suppress(docker_errors.DockerException):
                self._remove_by_name(name)
            raise SandboxError(f"could not create the sandbox: {error}") from error
        log.info(
            "sandbox.created",
            backend=self.name,
            sandbox=name,
            subject=spec.subject,
            app_id=spec.app_id,
        )
        return SandboxRef(
            backend=self.name, id=container.id, name=name, labels=labels, state="running"
        )

    def start(self, ref: SandboxRef) -> None:
        with _engine_errors(f"could not start {ref.name}"):
            self._container(ref).start()

    def stop(self, ref: SandboxRef, timeout: float = 5) -> None:
        with _engine_errors(f"could not stop {ref.name}"):
            self._container(ref).stop(timeout=int(timeout))

    def remove(self, ref: SandboxRef) -> None:
        with _engine_errors(f"could not remove {ref.name}"):
            self._remove_by_name(ref.name)
        log.info("sandbox.removed", backend=self.name, sandbox=ref.name)

    def _standby_host_dir(self, name: str) -> Path | None:
        return self.standby_root / name if self.standby_root is not None else None

    def _attachments_host_dir(self, name: str) -> Path | None:
        return self.attachments_root / name if self.attachments_root is not None else None

    def attachments_dir(self, ref: SandboxRef) -> Path:
        folder = self._attachments_host_dir(ref.name)
        if folder is None or not folder.is_dir():
            raise SandboxError(
                f"sandbox {ref.name} has no attachments folder (it predates attachments: recreate it)"
            )
        return folder

    def _remove_by_name(self, name: str) -> None:
        with contextlib.suppress(docker_errors.NotFound):
            self.client.containers.get(name).remove(force=True, v=True)
        standby = self._standby_host_dir(name)
        if standby is not None:
            shutil.rmtree(standby, ignore_errors=True)
        attachments = self._attachments_host_dir(name)
        if attachments is not None:
            try:
                remove_read_only_tree(attachments)
            except OSError as error:  # a leftover folder is no reason to keep the sandbox
                log.warning(
                    "sandbox.attachments_remove_failed", sandbox=name, error=str(error)[:300]
                )
        for attempt in range(10):
            try:
                self.client.volumes.get(_workspace_volume(name)).remove(force=True)
                return
            except docker_errors.NotFound:
                return
            except docker_errors.APIError:
                if attempt == 9:
                    raise
                time.sleep(0.2)  # the engine may still be releasing the container's mounts

    def list_by_label(self, labels: Mapping[str, str] | None = None) -> list[SandboxRef]:
        wanted = {LABEL_SANDBOX: "1", **(labels or {})}
        with _engine_errors("could not list sandboxes"):
            containers = self.client.containers.list(
                all=True, filters={"label": [f"{key}={value}" for key, value in wanted.items()]}
            )
        return [
            SandboxRef(
                backend=self.name, id=c.id, name=c.name, labels=dict(c.labels), state=c.status
            )
            for c in containers
        ]

    def prune_orphan_volumes(self, older_than: float = 600, dry_run: bool = False) -> list[str]:
        """Workspace volumes whose sandbox container is gone (removed by something other than
        `remove`). Young ones are left alone: `create` makes the volume just before the
        container."""
        orphans = []
        for volume in self.client.volumes.list(filters={"label": f"{LABEL_SANDBOX}=1"}):
            name = volume.name.removesuffix("-workspace")
            created = volume.attrs.get("CreatedAt", "")
            with contextlib.suppress(ValueError):
                age = (
                    time.time() - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
                )
                if age < older_than:
                    continue
            if self.client.containers.list(all=True, filters={"name": f"^/{name}$"}):
                continue
            orphans.append(volume.name)
            if not dry_run:
                with contextlib.suppress(docker_errors.NotFound, docker_errors.APIError):
                    volume.remove()
        return orphans

    def _container(self, ref: SandboxRef) -> Any:
        try:
            return self.client.containers.get(ref.id)
        except docker_errors.NotFound as error:
            raise SandboxNotFound(f"sandbox {ref.name} does not exist") from error

    # --- commands --------------------------------------------------------------------------

    def _exec_create(
        self,
        ref: SandboxRef,
        argv: list[str],
        *,
        user: str | None,
        env: Mapping[str, str] | None,
        workdir: str,
        stdin: bool,
        tty: bool = False,
    ) -> str:
        try:
            created = self.client.api.exec_create(
                ref.id,
                argv,
                stdout=True,
                stderr=True,
                stdin=stdin,
                tty=tty,
                user=user or "",
                environment=dict(env or {}),
                workdir=workdir,
            )
        except docker_errors.NotFound as error:
            raise SandboxNotFound(f"sandbox {ref.name} does not exist") from error
        except docker_errors.APIError as error:
            raise SandboxError(
                f"could not run a command in {ref.name}: {error.explanation}"
            ) from error
        except (docker_errors.DockerException, OSError) as error:
            raise SandboxError(f"could not run a command in {ref.name}: {error}") from error
        return str(created["Id"])

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(100):
            state = self.client.api.exec_inspect(exec_id)
            if not state.get("Running") and state.get("ExitCode") is not None:
                return int(state["ExitCode"])
            time.sleep(0.02)
        return -1

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
        if timeout is not None:
            # `timeout` kills the command's whole process group, so background children go too.
            argv = ["timeout", "-s", "KILL", f"{timeout:g}s", *argv]
        argv = ["sh", "-c", _EXEC_WRAPPER, "sh", *argv]
        exec_id = self._exec_create(
            ref, argv, user=user, env=env, workdir=workdir, stdin=stdin is not None
        )
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout + _EXEC_GRACE_SECONDS
        out, err = CappedBuffer(), CappedBuffer()
        with _engine_errors(f"could not run a command in {ref.name}"):
            connection = _Hijacked(self.client.api, exec_id)
        writer = None
        if stdin is not None:
            writer = threading.Thread(target=connection.send_all, args=(stdin,), daemon=True)
            writer.start()
        timed_out = False
        try:
            for stream, chunk in connection.frames(deadline):
                (err if stream == _STDERR else out).write(chunk)
        except TimeoutError:
            timed_out = True  # something escaped the process group and holds the output open
        except OSError as error:
            raise SandboxError(f"lost the output of a command in {ref.name}: {error}") from error
        finally:
            connection.close()
        with _engine_errors(f"could not read the exit code of a command in {ref.name}"):
            exit_code = -1 if timed_out else self._exit_code(exec_id)
        if timeout is not None and exit_code == 137 and time.monotonic() - started >= timeout:
            timed_out = True
        return ExecResult(
            exit_code=exit_code,
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

    def _stream_out(self, ref: SandboxRef, argv: list[str]) -> Iterator[bytes]:
        exec_id = self._exec_create(ref, argv, user=None, env=None, workdir="/", stdin=False)

        def stream() -> Iterator[bytes]:
            err = CappedBuffer(64 * 1024)
            with _engine_errors(f"could not read from {ref.name}"):
                connection = _Hijacked(self.client.api, exec_id)
            try:
                for kind, chunk in connection.frames(None):
                    if kind == _STDERR:
                        err.write(chunk)
                    else:
                        yield chunk
            except OSError as error:
                raise SandboxError(f"lost the archive stream of {ref.name}: {error}") from error
            finally:
                connection.close()
            with _engine_errors(f"could not read the exit code of tar in {ref.name}"):
                code = self._exit_code(exec_id)
            if code != 0:
                message = err.getvalue().decode("utf-8", "replace").strip()[:500]
                raise SandboxError(f"{argv[0]} exited with {code}: {message}")

        return stream()

    def start_process(
        self,
        ref: SandboxRef,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        workdir: str = WORKSPACE,
    ) -> None:
        exec_id = self._exec_create(ref, argv, user=None, env=env, workdir=workdir, stdin=False)
        with _engine_errors(f"could not start a process in {ref.name}"):
            self.client.api.exec_start(exec_id, detach=True)

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
        # The container's own user and environment (no secrets: those reach the driver in its
        # boot payload), never privileged, no capability beyond the container's (none).
        environment = {**(env or {}), TERMINAL_MARKER_ENV: terminal_id}
        exec_id = self._exec_create(
            ref,
            argv,
            user=f"{SANDBOX_UID}:{SANDBOX_GID}",
            env=environment,
            workdir=WORKSPACE,
            stdin=True,
            tty=True,
        )
        terminal = _DockerTerminal(self, ref, exec_id, terminal_id)
        try:
            terminal.resize(rows, cols)
        except SandboxError:
            terminal.close()
            raise
        return terminal

    def end_terminal_processes(self, ref: SandboxRef, terminal_id: str) -> None:
        """Kill every process of terminal `terminal_id` in the sandbox (gone already: fine)."""
        try:
            self.exec(
                ref,
                ["sh", "-c", TERMINAL_KILL_SCRIPT, "sh", terminal_id, TERMINAL_MARKER_ENV],
                timeout=30,
            )
        except SandboxNotFound:
            pass  # the sandbox went, and its processes with it
        except SandboxError:
            try:
                with _engine_errors(f"could not inspect {ref.name}"):
                    still_running = self._container(ref).status == "running"
            except SandboxNotFound:
                return
            if still_running:
                raise  # a stopped container has no processes left to end

    def stats(self, ref: SandboxRef) -> SandboxStats:
        with _engine_errors(f"could not read the use of {ref.name}"):
            container = self._container(ref)
            # Not one_shot: the engine samples twice, a second apart, so precpu_stats is filled.
            sample = container.stats(stream=False)
        state = container.attrs.get("State", {})
        started_at = None
        if state.get("Running"):
            with contextlib.suppress(ValueError, TypeError):
                started_at = _parse_engine_time(state["StartedAt"])
        return SandboxStats(
            started_at=started_at,
            image=str((container.attrs.get("Config") or {}).get("Image", "")),
            cpu_percent=_cpu_percent(sample),
            memory_bytes=_memory_bytes(sample),
            memory_limit_bytes=(sample.get("memory_stats") or {}).get("limit"),
        )

    def describe_enforcement(self) -> dict[str, str]:
        limits = self.limits
        return {
            "user": f"uid {SANDBOX_UID} (non-root), no-new-privileges, every capability dropped",
            "syscalls": "Docker's default seccomp profile",
            "filesystem": "read-only root; /workspace volume, /tmp and /run/mosoo/boot tmpfs; /mnt/attachments a read-only bind",
            "network": "none by default (no interface but loopback); `full` is the default bridge",
            "memory": f"cgroup limit, {limits.memory_mb} MiB by default, no swap; OOM kills inside",
            "pids": f"cgroup pids.max, {limits.pids_limit} by default",
            "cpu": f"CFS quota, {limits.cpus:g} CPU by default",
            "disk": "not limited (the workspace volume grows on the engine's disk)",
        }
