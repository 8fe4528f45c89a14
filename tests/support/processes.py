"""Start Mosoo's real processes for tests, on loopback, and stop exactly what was started."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support import redis_db

ROOT = Path(__file__).resolve().parents[2]


def loopback_listener() -> socket.socket:
    """A TCP socket bound to a free loopback port, for a test server to serve on. The
    protocol is named: asyncio sets TCP_NODELAY on the sockets it accepts only then (with 0,
    Nagle stayed on: a 40 ms stall whenever a keep-alive connection was reused at once)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    return listener


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    # Checked again after 10 ms, then twice as long each time up to 200 ms: most waits end
    # within a few milliseconds (a server thread's start, a row written), and a flat 200 ms
    # made each of them cost at least that (hundreds of fixtures a suite).
    pause = 0.01
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {process.returncode}")
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def mosoo_env(data_dir: Path, database_url: str, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MOSOO_") or k.startswith("MOSOO_TEST_")
    }
    env.update(
        MOSOO_DATA_DIR=str(data_dir),
        MOSOO_DATABASE_URL=database_url,
        MOSOO_SECRET_KEY="test-secret-key",
        REFLEX_USE_SYSTEM_BUN="1",
        # Each web process builds its own frontend: the build embeds its port, so two
        # servers sharing one .web folder would hand out each other's bundles. A console
        # started through console_slot() gets its slot's folder instead.
        REFLEX_WEB_WORKDIR=str(data_dir / "reflex-web"),
        REFLEX_STATES_WORKDIR=str(data_dir / "reflex-states"),
        REFLEX_TELEMETRY_ENABLED="false",
        PYTHONUNBUFFERED="1",
        # Every browser test signs in from 127.0.0.1 against one database per backend; the
        # per-IP limit on code requests (tested in tests/service) would cut the suite short.
        MOSOO_EMAIL_SENDS_PER_IP_PER_HOUR="1000",
        # The scripted model servers listen on loopback, which a provider's base URL may
        # reach only with this on (tests/service/test_provider_connection.py: off refuses).
        MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS="true",
        # No warm pool unless a test asks (extra=): members are sandboxes a test did not make.
        MOSOO_POOL_SIZE="0",
    )
    env.update(extra)
    return env


# --- Consoles: `mosoo web` on a port and frontend folder that outlive one test ---------------
#
# `mosoo web` rebuilds the frontend (about 12 s of a 21 s start) only when its compiled input
# changed, and the port is part of that input. A console on a free port therefore built every
# time; a console on a slot's fixed port, in the slot's own folder, reuses the build of the
# previous console on that slot. A worker's ports follow its Redis databases
# (CONSOLE_BASE_PORT + its first database + slot, tests/support/redis_db.py), so neither two
# workers nor two suites sharing one machine by MOSOO_TEST_REDIS_DB_OFFSET pick the same
# port; each worker has its own folders, and a slot is held by one console at a time.
CONSOLE_SLOTS = redis_db.PER_WORKER  # more consoles than this never run at once in one worker
# Below Linux's ephemeral range (32768-60999), where free_port() and clients' ports come from.
CONSOLE_BASE_PORT = 21000
_consoles_in_use: set[int] = set()
_console_root: list[Path] = []  # created on first use, removed at exit


@dataclass(frozen=True)
class Console:
    port: int
    url: str
    env: dict[str, str]  # MOSOO_WEB_PORT, MOSOO_PUBLIC_URL and REFLEX_WEB_WORKDIR for `mosoo web`


def _console_folders() -> Path:
    if not _console_root:
        folder = Path(tempfile.mkdtemp(prefix="mosoo-consoles-"))
        atexit.register(shutil.rmtree, folder, True)
        _console_root.append(folder)
    return _console_root[0]


def _bindable(port: int) -> bool:
    """As `mosoo web` binds: on every address, with SO_REUSEADDR (without it, the connections
    a console just stopped on this port left in TIME_WAIT made the slot look taken for a
    minute, and the next console went to another slot and built again)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def console_slot() -> Iterator[Console]:
    """The lowest free console slot of this worker, held until the block ends: start one
    `mosoo web` with `env` added to its settings."""
    first = CONSOLE_BASE_PORT + redis_db.OFFSET
    for port in range(first, first + CONSOLE_SLOTS):
        if port not in _consoles_in_use and _bindable(port):
            break
    else:
        raise RuntimeError(f"no free console port in {first}-{first + CONSOLE_SLOTS - 1}")
    _consoles_in_use.add(port)
    url = f"http://127.0.0.1:{port}"
    env = {
        "MOSOO_WEB_PORT": str(port),
        "MOSOO_PUBLIC_URL": url,
        "REFLEX_WEB_WORKDIR": str(_console_folders() / f"reflex-web-{port}"),
    }
    try:
        yield Console(port=port, url=url, env=env)
    finally:
        _consoles_in_use.discard(port)


@contextlib.contextmanager
def running(
    args: list[str], env: dict[str, str], log_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `mosoo <args>` in its own process group; stop that group afterwards."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mosoo_core.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            stop_group(process)


def stop_group(process: subprocess.Popen[bytes], timeout: float = 20) -> int:
    return stop_groups([process], timeout)[0]


def stop_groups(processes: list[subprocess.Popen[bytes]], timeout: float = 20) -> list[int]:
    """SIGTERM every process group at once, then wait for each (SIGKILL after `timeout`):
    a stack's processes shut down side by side rather than one after the other."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return [process.returncode for process in processes]


def page_served(url: str) -> bool:
    try:
        response = httpx.get(url, timeout=2, follow_redirects=True)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and "<html" in response.text.lower()
