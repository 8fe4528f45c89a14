"""Sandboxes without Docker: every command runs in its own bubblewrap (`bwrap`) sandbox.

A sandbox is a directory on the host (`<data_dir>/sandboxes/<name>`) holding its
/workspace, its /run/mosoo/boot and a metadata file with its labels; each command (and the
detached driver) gets fresh user, mount, pid, network, ipc, uts and cgroup namespaces
(`--unshare-all`, no `--share-net` unless the policy is `full`), a read-only root made of
the host's /usr and a few /etc files, its own /tmp (tmpfs, gone when the command ends), the
control socket's directory at /run/mosoo/control, and the driver runtime at /opt/mosoo.
The runtime brings its own Node.js and npm (/opt/mosoo/node/bin, ahead of /usr/bin on PATH,
so a Node the host may have under /usr is not the one used) and the /etc/profile.d that puts
PATH back after the host's /etc/profile resets it in login shells, as in the image.

Who the processes are: uid 10001 inside. When Mosoo runs as root they are host uid 10001
too (`setpriv` drops root before `bwrap`, which then runs unprivileged); otherwise they are
the invoking user's uid.

Limits: with a writable cgroup hierarchy (root), one cgroup per sandbox holds memory (no
swap), pids and CPU for all its processes together and lets stop() kill them all. Without
it, rlimits: RLIMIT_DATA per process for memory and RLIMIT_NPROC for pids, which the kernel
counts per host uid, so it is shared by every process sandbox of that uid; CPU is not
limited. `describe_enforcement()` says which applies.

Lifetimes: a synchronous exec dies with the calling process (`--die-with-parent`) and, as
the pid namespace ends with the command, leaves nothing behind. Detached processes
(`start_process`, the driver) outlive the caller like a container does, until stop/remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from driver.protocol import SKILLS_DIR
from mosoo_core.ids import new_id
from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox._base import (
    ATTACHMENTS_DIR,
    BOOT_DIR,
    CHUNK_BYTES,
    CONTROL_DIR,
    LABEL_SANDBOX,
    SANDBOX_GID,
    SANDBOX_PATH,
    SANDBOX_UID,
    SANDBOX_USER,
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
)
from mosoo_core.runtime.sandbox._cgroups import (
    SandboxCgroup,
    cgroup_version_available,
    create_cgroup,
)
from mosoo_core.runtime.sandbox._streams import CappedBuffer, drain_in_thread, iter_chunks
from mosoo_core.runtime.sandbox.image import ensure_process_runtime

log = get_logger("mosoo.sandbox.process")

# Read-only from the host's /etc: what the dynamic linker, Python and TLS need; nothing else.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "mime.types",
    "os-release",
    "python3",
    "python3.11",
    "bash.bashrc",
    "profile",
    "inputrc",
)
ETC_NETWORK_ENTRIES = ("resolv.conf", "hosts", "host.conf", "gai.conf")
# Top-level directories of a merged-/usr system, recreated as symlinks (or bound if real).
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Joins the sandbox's cgroups (argv up to "--"), then becomes the rest of argv.
_JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done; shift; exec "$@"'
_INFO_TIMEOUT_SECONDS = 10.0
# CPU use is the cgroup's CPU time over this long, as Docker's two samples a second apart.
_STATS_SAMPLE_SECONDS = 1.0
# Where Node looks for an environment's packages, as the image's ENV NODE_PATH.
NODE_PATH = "/opt/mosoo/env/node/node_modules"


def _utcnow() -> str:
    return datetime.now(UTC).isoformat()


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a pid, to tell it from a later process with the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


class _PtyTerminal(TerminalProcess):
    """A command on a pseudo-terminal, in a bwrap sandbox of its own like `exec`: its pid
    namespace ends with it, so killing it ends every process it started."""

    # How often a blocked read looks whether the terminal was closed meanwhile.
    _POLL_SECONDS = 0.5

    def __init__(self, process: subprocess.Popen[bytes], master: int) -> None:
        self._process, self._master = process, master
        self._closed = threading.Event()
        self._fd_lock = threading.Lock()

    def read(self) -> bytes:
        # The reading side owns the master: closing it under a blocked read could hand the
        # reader someone else's file descriptor.
        while True:
            with self._fd_lock:
                if self._master == -1:
                    return b""
                master = self._master
            ready, _, _ = select.select([master], [], [], self._POLL_SECONDS)
            if not ready and not self._closed.is_set():
                continue
            try:
                data = os.read(master, 65536) if ready else b""
            except OSError:  # EIO: the last process holding the terminal ended
                data = b""
            if data:
                return data
            with self._fd_lock:
                os.close(self._master)
                self._master = -1
            return b""

    def write(self, data: bytes) -> None:
        with self._fd_lock:
            if self._master == -1:
                raise SandboxError("the terminal has ended")
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self._master, view)
                except OSError as error:
                    raise SandboxError(f"the terminal has ended: {error}") from error
                view = view[written:]

    def resize(self, rows: int, cols: int) -> None:
        with self._fd_lock:
            if self._master != -1:
                size = struct.pack("HHHH", rows, cols, 0, 0)
                fcntl.ioctl(self._master, termios.TIOCSWINSZ, size)

    def close(self) -> None:
        self._closed.set()
        if self._process.poll() is None:
            # bwrap's sandbox dies with it (--die-with-parent), pid namespace and all.
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        self._process.wait()


def _read_info(fd: int, deadline: float) -> dict[str, Any]:
    """bwrap's --info-fd JSON ({"child-pid": ...}), read without waiting for EOF."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        with contextlib.suppress(ValueError):
            return dict(json.loads(data))
    raise SandboxError(f"bwrap did not report its sandbox pid: {data[:200]!r}")


class ProcessBackend(SandboxBackend):
    name = "process"

    def __init__(
        self,
        root: Path,
        *,
        runtime_parent: Path | None = None,
        runtime_dir: Path | None = None,
        limits: Limits | None = None,
        use_cgroups: bool = True,
    ) -> None:
        """root: where sandbox directories live (every parent must be traversable by uid
        10001 when running as root). runtime_dir: what to mount at /opt/mosoo; made under
        runtime_parent on first use when not given."""
        if shutil.which("bwrap") is None:
            raise SandboxError(
                "the process backend needs bubblewrap (apt-get install -y bubblewrap)"
            )
        self.root = root.resolve()
        self.limits = limits or Limits()
        self._runtime_parent = (runtime_parent or self.root.parent / "sandbox-runtime").resolve()
        self._runtime_dir = runtime_dir
        self._runtime_lock = threading.Lock()
        self._use_cgroups = use_cgroups
        self._as_root = os.geteuid() == 0
        self._host_uid = SANDBOX_UID if self._as_root else os.getuid()
        self._host_gid = SANDBOX_GID if self._as_root else os.getgid()
        self._detached: list[subprocess.Popen[bytes]] = []
        self._probed_cgroup_version: int | None = None

    @property
    def runtime_dir(self) -> Path:
        with self._runtime_lock:
            if self._runtime_dir is None:
                self._runtime_dir = ensure_process_runtime(self._runtime_parent)
            return self._runtime_dir

    # --- metadata ------------------------------------------------------------------------

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise SandboxNotFound(f"sandbox {name!r} does not exist")
        return self.root / name

    def _read_meta(self, name: str) -> dict[str, Any]:
        try:
            return dict(json.loads((self._dir(name) / "meta.json").read_text()))
        except FileNotFoundError as error:
            raise SandboxNotFound(f"sandbox {name} does not exist") from error

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        path = self._dir(name) / "meta.json"
        staging = path.with_suffix(".tmp")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(meta, handle)
        staging.replace(path)

    def _update_meta(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        lock_path = self._dir(name) / ".lock"
        if not lock_path.parent.exists():
            raise SandboxNotFound(f"sandbox {name} does not exist")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            meta = self._read_meta(name)
            change(meta)
            self._write_meta(name, meta)
            return meta

    def _ref(self, meta: dict[str, Any]) -> SandboxRef:
        return SandboxRef(
            backend=self.name,
            id=meta["name"],
            name=meta["name"],
            labels=meta["labels"],
            state=meta["state"],
        )

    @staticmethod
    def _cgroup(meta: dict[str, Any]) -> SandboxCgroup | None:
        group = meta.get("cgroup")
        return SandboxCgroup.from_dirs(group["version"], group["dirs"]) if group else None

    # --- lifecycle -----------------------------------------------------------------------

    def _check_reachable(self, path: Path) -> None:
        """As root the sandbox is uid 10001 on the host, which must be able to reach it."""
        if not self._as_root:
            return
        for parent in [path, *path.parents]:
            if parent.exists() and not parent.stat().st_mode & 0o001:
                raise SandboxError(
                    f"{parent} is not traversable by the sandbox user (uid {SANDBOX_UID}); "
                    f"chmod o+x it or keep sandboxes elsewhere"
                )

    def create(self, spec: SandboxSpec) -> SandboxRef:
        limits = self.limits.apply(spec)
        runtime = self.runtime_dir
        name = f"mosoo-{new_id().lower()}"
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self._check_reachable(self.root)
        self._check_reachable(runtime)
        control_dir = control_socket_dir(spec)
        if control_dir is not None:
            self._check_reachable(control_dir)
        directory = self.root / name
        directory.mkdir(mode=0o711)
        group: SandboxCgroup | None = None
        try:
            for sub, mode in (("workspace", 0o755), ("boot", 0o700)):
                (directory / sub).mkdir(mode=mode)
                os.chown(directory / sub, self._host_uid, self._host_gid)
            (directory / "logs").mkdir(mode=0o700)
            # Written by the worker, bound read-only at /mnt/attachments (see attachments_dir).
            (directory / "attachments").mkdir()
            (directory / "attachments").chmod(0o755)
            etc = directory / "etc"
            etc.mkdir(mode=0o755)
            (etc / "passwd").write_text(
                f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:{SANDBOX_USER}:{WORKSPACE}:/bin/bash\n"
                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            )
            (etc / "group").write_text(f"{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n")
            for entry in ("passwd", "group"):
                os.chmod(etc / entry, 0o644)
            group = (
                create_cgroup(name, limits.memory_mb, limits.pids_limit, limits.cpus)
                if self._use_cgroups
                else None
            )
            labels = spec.all_labels()
            meta = {
                "name": name,
                "labels": labels,
                "state": "running",
                "created_at": _utcnow(),
                "network": spec.network,
                "control_dir": str(control_dir) if control_dir is not None else None,
                "mounts": [[str(m.source), m.target, m.read_only] for m in spec.mounts],
                "env": dict(spec.env),
                "limits": {
                    "memory_mb": limits.memory_mb,
                    "cpus": limits.cpus,
                    "pids_limit": limits.pids_limit,
                },
                "runtime": str(runtime),
                "cgroup": {"version": group.version, "dirs": [str(d) for d in group.dirs]}
                if group
                else None,
                "processes": [],
            }
            self._write_meta(name, meta)
        except Exception:
            if group is not None:
                group.remove()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        log.info(
            "sandbox.created",
            backend=self.name,
            sandbox=name,
            subject=spec.subject,
            app_id=spec.app_id,
        )
        return self._ref(meta)

    def start(self, ref: SandboxRef) -> None:
        def change(meta: dict[str, Any]) -> None:
            meta["state"] = "running"

        self._update_meta(ref.name, change)

    def stop(self, ref: SandboxRef, timeout: float = 5) -> None:
        meta = self._read_meta(ref.name)
        group = self._cgroup(meta)
        for process in meta.get("processes", []):
            # Killing the pid namespace's first process ends every process in it.
            if _start_time(process["pid"]) == process["start"]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(process["pid"], signal.SIGKILL)
        if group is not None:
            group.kill_all()
        self._reap()

        def change(meta: dict[str, Any]) -> None:
            meta["state"] = "exited"
            meta["processes"] = []

        self._update_meta(ref.name, change)

    def remove(self, ref: SandboxRef) -> None:
        directory = self._dir(ref.name)
        if not (directory / "meta.json").exists():
            shutil.rmtree(directory, ignore_errors=True)
            return
        self.stop(ref)
        group = self._cgroup(self._read_meta(ref.name))
        if group is not None:
            group.remove()

        def allow_and_retry(function: Any, path: str, _: Any) -> None:
            with contextlib.suppress(OSError):
                os.chmod(os.path.dirname(path), 0o700)
                function(path)

        shutil.rmtree(directory, onerror=allow_and_retry)
        log.info("sandbox.removed", backend=self.name, sandbox=ref.name)

    def attachments_dir(self, ref: SandboxRef) -> Path:
        folder = self._dir(ref.name) / "attachments"
        if not folder.is_dir():
            raise SandboxError(
                f"sandbox {ref.name} has no attachments folder (it predates attachments: recreate it)"
            )
        return folder

    def list_by_label(self, labels: Mapping[str, str] | None = None) -> list[SandboxRef]:
        wanted = {LABEL_SANDBOX: "1", **(labels or {})}
        refs: list[SandboxRef] = []
        if not self.root.exists():
            return refs
        for meta_path in sorted(self.root.glob("*/meta.json")):
            with contextlib.suppress(OSError, ValueError, KeyError):
                meta = json.loads(meta_path.read_text())
                if all(meta["labels"].get(key) == value for key, value in wanted.items()):
                    refs.append(self._ref(meta))
        return refs

    def _reap(self) -> None:
        self._detached = [p for p in self._detached if p.poll() is None]

    # --- commands --------------------------------------------------------------------------

    def _running_meta(self, ref: SandboxRef) -> dict[str, Any]:
        meta = self._read_meta(ref.name)
        if meta["state"] != "running":
            raise SandboxError(f"sandbox {ref.name} is not running")
        return meta

    def _command(
        self,
        meta: dict[str, Any],
        argv: list[str],
        env: Mapping[str, str] | None,
        workdir: str,
        *,
        detached: bool,
        info_fd: int | None = None,
    ) -> list[str]:
        directory = self._dir(meta["name"])
        limits = meta["limits"]
        prefix: list[str] = []
        group = self._cgroup(meta)
        if group is not None:
            prefix += ["/bin/sh", "-c", _JOIN_CGROUPS, "sh", *group.procs_files, "--"]
        else:
            memory = limits["memory_mb"] * 1024 * 1024
            prefix += ["prlimit", f"--nproc={limits['pids_limit']}", f"--data={memory}", "--"]
        if self._as_root:
            prefix += [
                "setpriv",
                f"--reuid={self._host_uid}",
                f"--regid={self._host_gid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--no-new-privs",
                "--",
            ]
        bwrap = [
            "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]
        if meta["network"] == "full":
            bwrap.append("--share-net")
        if not detached:
            bwrap.append("--die-with-parent")
        bwrap += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "sandbox"]
        bwrap += ["--ro-bind", "/usr", "/usr"]
        for top in USR_LINKS:
            path = Path("/") / top
            if path.is_symlink():
                bwrap += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                bwrap += ["--ro-bind", str(path), str(path)]
        etc_entries = ETC_ENTRIES + (ETC_NETWORK_ENTRIES if meta["network"] == "full" else ())
        for entry in etc_entries:
            bwrap += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
        bwrap += [
            "--ro-bind",
            str(directory / "etc" / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(directory / "etc" / "group"),
            "/etc/group",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            meta["runtime"],
            "/opt/mosoo",
            # Only mosoo.sh (a runtime made before it had one leaves login shells as they were).
            "--ro-bind-try",
            str(Path(meta["runtime"]) / "profile.d"),
            "/etc/profile.d",
            "--bind",
            str(directory / "workspace"),
            WORKSPACE,
            "--bind",
            str(directory / "boot"),
            BOOT_DIR,
        ]
        if meta.get("control_dir"):
            # The socket's directory, not the socket: it survives control restarts (_base.py).
            bwrap += ["--ro-bind", meta["control_dir"], CONTROL_DIR]
        attachments = directory / "attachments"
        if attachments.is_dir() and not any(
            str(m[1]).startswith(ATTACHMENTS_DIR) for m in meta["mounts"]
        ):
            bwrap += ["--ro-bind", str(attachments), ATTACHMENTS_DIR]
        # /opt/mosoo is the read-only runtime, where bwrap cannot make mount points: skills
        # (/opt/mosoo/skills/<name>) go on a tmpfs over its empty skills/, read-only after.
        skills = [m for m in meta["mounts"] if str(m[1]).startswith(f"{SKILLS_DIR}/")]
        if skills:
            bwrap += ["--perms", "0555", "--tmpfs", SKILLS_DIR]
        for source, target, read_only in meta["mounts"]:
            bwrap += ["--ro-bind" if read_only else "--bind", source, target]
        if skills:
            bwrap += ["--remount-ro", SKILLS_DIR]
        bwrap += ["--remount-ro", "/", "--clearenv"]
        environment = {
            "PATH": SANDBOX_PATH,
            "HOME": WORKSPACE,
            "USER": SANDBOX_USER,
            "LOGNAME": SANDBOX_USER,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONPATH": "/opt/mosoo",
            "NODE_PATH": NODE_PATH,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **meta["env"],
            **(env or {}),
        }
        for key, value in environment.items():
            bwrap += ["--setenv", key, value]
        bwrap += ["--chdir", workdir]
        if info_fd is not None:
            bwrap += ["--info-fd", str(info_fd)]
        return [*prefix, *bwrap, "--", *argv]

    def _check_user(self, user: str | None) -> None:
        if user not in (None, "", SANDBOX_USER, str(SANDBOX_UID), f"{SANDBOX_UID}:{SANDBOX_GID}"):
            raise SandboxError("the process backend runs every command as the sandbox user")

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
        self._check_user(user)
        meta = self._running_meta(ref)
        command = self._command(meta, argv, env, workdir, detached=False)
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert process.stdout is not None and process.stderr is not None
        out, err = CappedBuffer(), CappedBuffer()
        readers = [drain_in_thread(process.stdout, out), drain_in_thread(process.stderr, err)]
        if stdin is not None:
            threading.Thread(target=self._feed, args=(process, stdin), daemon=True).start()
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill()  # bwrap's sandbox dies with it (--die-with-parent), pid namespace and all
            process.wait()
        for reader in readers:
            reader.join(timeout=10)
        return ExecResult(
            exit_code=-1 if timed_out else process.returncode,
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

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
        meta = self._running_meta(ref)
        environment = {**(env or {}), TERMINAL_MARKER_ENV: terminal_id}
        # bwrap's --new-session leaves the command without a controlling terminal; `setsid
        # --ctty` gives the shell this pty as its own (job control, ^C, SIGWINCH), and --wait
        # keeps the pid namespace up for as long as the shell runs.
        command = self._command(
            meta, ["setsid", "--ctty", "--wait", *argv], environment, WORKSPACE, detached=False
        )
        master, slave = os.openpty()
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            process = subprocess.Popen(
                command,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return _PtyTerminal(process, master)

    @staticmethod
    def _feed(process: subprocess.Popen[bytes], data: TarData) -> None:
        assert process.stdin is not None
        try:
            for chunk in iter_chunks(data):
                process.stdin.write(chunk)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the command stopped reading; its exit code says why
        finally:
            with contextlib.suppress(OSError):
                process.stdin.close()

    def _stream_out(self, ref: SandboxRef, argv: list[str]) -> Iterator[bytes]:
        meta = self._running_meta(ref)
        command = self._command(meta, argv, None, "/", detached=False)

        def stream() -> Iterator[bytes]:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            assert process.stdout is not None and process.stderr is not None
            err = CappedBuffer(64 * 1024)
            reader = drain_in_thread(process.stderr, err)
            try:
                while chunk := os.read(process.stdout.fileno(), CHUNK_BYTES):
                    yield chunk
                process.wait()
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            reader.join(timeout=10)
            if process.returncode != 0:
                message = err.getvalue().decode("utf-8", "replace").strip()[:500]
                raise SandboxError(f"{argv[0]} exited with {process.returncode}: {message}")

        return stream()

    def start_process(
        self,
        ref: SandboxRef,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        workdir: str = WORKSPACE,
    ) -> None:
        meta = self._running_meta(ref)
        directory = self._dir(ref.name)
        read_end, write_end = os.pipe()
        try:
            command = self._command(meta, argv, env, workdir, detached=True, info_fd=write_end)
            log_fd = os.open(
                directory / "logs" / "process.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
            )
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    pass_fds=(write_end,),
                    start_new_session=True,
                )
            finally:
                os.close(log_fd)
            os.close(write_end)
            write_end = -1
            info = _read_info(read_end, time.monotonic() + _INFO_TIMEOUT_SECONDS)
        finally:
            os.close(read_end)
            if write_end != -1:
                os.close(write_end)
        self._detached.append(process)
        pid = int(info["child-pid"])
        record = {"pid": pid, "start": _start_time(pid), "argv0": argv[0]}

        def change(meta: dict[str, Any]) -> None:
            meta["processes"] = [
                p for p in meta["processes"] if _start_time(p["pid"]) == p["start"]
            ] + [record]

        self._update_meta(ref.name, change)

    # --- what holds ------------------------------------------------------------------------

    def stats(self, ref: SandboxRef) -> SandboxStats:
        meta = self._read_meta(ref.name)
        group = self._cgroup(meta)
        limit = int(meta["limits"]["memory_mb"]) * 1024 * 1024
        # Processes live only as long as their command here: "started" is when it was made.
        started_at = datetime.fromisoformat(meta["created_at"].replace("Z", "+00:00"))
        if meta["state"] != "running" or group is None:
            return SandboxStats(started_at, "", None, None, limit if group else None)
        memory, cpu_before = group.usage()
        begun = time.monotonic()
        time.sleep(_STATS_SAMPLE_SECONDS)
        _, cpu_after = group.usage()
        elapsed = time.monotonic() - begun
        # Never below 0: a process that exited between the samples took its time with it.
        cpu_percent = round(max(0, cpu_after - cpu_before) / 1e9 / elapsed * 100, 2)
        return SandboxStats(started_at, "", cpu_percent, memory, limit)

    def describe_enforcement(self) -> dict[str, str]:
        limits = self.limits
        version = self._cgroup_version()
        who = f"host uid {self._host_uid}" + (
            " (root dropped with setpriv)" if self._as_root else " (the invoking user)"
        )
        facts = {
            "user": f"uid {SANDBOX_UID} inside, {who}; no capabilities, no_new_privs, no nested user namespaces",
            "namespaces": "user, mount, pid, network, ipc, uts, cgroup: fresh for every command",
            "syscalls": "no seccomp filter (Docker's default profile has no equivalent here)",
            "filesystem": "read-only root of the host's /usr and a few /etc files; /workspace is a host dir; /tmp is a tmpfs per command; /mnt/attachments and each /opt/mosoo/skills/<name> a read-only bind",
            "network": "none by default (own namespace with only loopback); `full` shares the host's",
            "disk": "not limited",
        }
        if version is not None:
            facts |= {
                "memory": f"cgroup v{version} per sandbox, {limits.memory_mb} MiB by default, no swap; OOM kills inside",
                "pids": f"cgroup v{version} pids.max per sandbox, {limits.pids_limit} by default",
                "cpu": f"cgroup v{version} CFS quota, {limits.cpus:g} CPU by default",
            }
        else:
            facts |= {
                "memory": f"RLIMIT_DATA per process ({limits.memory_mb} MiB by default): allocations fail, nothing is OOM-killed",
                "pids": f"RLIMIT_NPROC {limits.pids_limit}, counted per host uid (shared by every process sandbox)",
                "cpu": "not limited",
            }
        return facts

    @property
    def limits_mechanism(self) -> str:
        """ "cgroup" or "rlimit": what holds memory and pids here."""
        return "cgroup" if self._cgroup_version() else "rlimit"

    def _cgroup_version(self) -> int | None:
        if not self._use_cgroups:
            return None
        if self._probed_cgroup_version is None:
            self._probed_cgroup_version = cgroup_version_available() or 0
        return self._probed_cgroup_version or None
