"""Fixtures for the sandbox contract: every test that takes `backend` runs against both
backends. Everything created is labelled with this run's id and removed afterwards, even
when a test fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from mosoo_core.runtime.sandbox import SandboxBackend, SandboxRef, SandboxSpec
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend
from mosoo_core.runtime.sandbox.image import ensure_process_runtime, ensure_sandbox_image
from mosoo_core.runtime.sandbox.process_backend import ProcessBackend

ROOT = Path(__file__).resolve().parents[3]
RUN_LABEL = "mosoo.test_run"

MakeSandbox = Callable[..., SandboxRef]


@pytest.fixture(scope="session")
def test_run_id() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def sandbox_tmp() -> Iterator[Path]:
    """A scratch dir the sandbox user (uid 10001) can traverse; pytest's tmp_path is 0700."""
    path = Path(tempfile.mkdtemp(prefix="mosoo-sandbox-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def docker_backend(test_run_id: str) -> Iterator[DockerBackend]:
    client = docker.from_env(timeout=600)
    # Built once (about a minute on a fresh machine, debootstrap included), then cached by tag.
    image = ensure_sandbox_image(client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", ""))
    backend = DockerBackend(client, image=image)
    yield backend
    for ref in backend.list_by_label({RUN_LABEL: test_run_id}):
        backend.remove(ref)
    client.close()


@pytest.fixture(scope="session")
def process_backend(sandbox_tmp: Path, test_run_id: str) -> Iterator[ProcessBackend]:
    # The runtime (driver + its packages) is cached by content like the image, in the same
    # place `mosoo up` keeps it.
    runtime = ensure_process_runtime(ROOT / "data" / "sandbox-runtime")
    backend = ProcessBackend(sandbox_tmp / "sandboxes", runtime_dir=runtime)
    yield backend
    for ref in backend.list_by_label({RUN_LABEL: test_run_id}):
        backend.remove(ref)


@pytest.fixture(params=["docker", "process"])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    return request.getfixturevalue(f"{request.param}_backend")  # type: ignore[no-any-return]


@pytest.fixture
def make_sandbox(backend: SandboxBackend, test_run_id: str) -> Iterator[MakeSandbox]:
    made: list[SandboxRef] = []

    def make(**fields: Any) -> SandboxRef:
        labels = {"mosoo.test": "1", RUN_LABEL: test_run_id, **fields.pop("labels", {})}
        spec = SandboxSpec(
            subject=fields.pop("subject", "session:test"),
            app_id="app_test",
            labels=labels,
            **fields,
        )
        ref = backend.create(spec)
        made.append(ref)
        return ref

    yield make
    for ref in made:
        backend.remove(ref)


@pytest.fixture
def sandbox(make_sandbox: MakeSandbox) -> SandboxRef:
    return make_sandbox()


class EchoSocket:
    """A Unix socket on the host that answers each connection with `prefix` + what it got.
    `restart()` does what a restarted control does: unlink the socket and bind a new one
    (a new inode) at the same path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.prefix = b"echo:"
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self, prefix: bytes = b"echo:") -> None:
        self.prefix = prefix
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        self.path.chmod(0o666)  # as control does: the sandbox user is not the owner
        server.listen()
        server.settimeout(0.1)
        self._server, self._stopping = server, threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(server, self._stopping, prefix), daemon=True
        )
        self._thread.start()

    @staticmethod
    def _serve(server: socket.socket, stopping: threading.Event, prefix: bytes) -> None:
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                with contextlib.suppress(OSError):
                    connection.sendall(prefix + connection.recv(1024))

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def restart(self, prefix: bytes) -> None:
        self.stop()
        self.start(prefix)


@pytest.fixture
def echo_server(sandbox_tmp: Path) -> Iterator[EchoSocket]:
    """An EchoSocket named control.sock in a directory of its own, laid out as control's
    (the directory 0755, the socket 0666)."""
    directory = Path(tempfile.mkdtemp(dir=sandbox_tmp))
    directory.chmod(0o755)
    server = EchoSocket(directory / "control.sock")
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def echo_socket(echo_server: EchoSocket) -> Path:
    """The host path of a running EchoSocket."""
    return echo_server.path


@pytest.fixture(scope="session")
def process_rlimit_backend(process_backend: ProcessBackend) -> ProcessBackend:
    """The process backend as it runs where no cgroup can be made (not root): rlimits only."""
    return ProcessBackend(
        process_backend.root, runtime_dir=process_backend.runtime_dir, use_cgroups=False
    )
