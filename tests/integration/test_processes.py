"""The long-running `mosoo` processes start, answer, and stop cleanly on SIGTERM (what a
supervisor or `docker stop` sends)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.processes import free_port, mosoo_env, running, stop_group, wait_for
from tests.support.redis_db import redis_url

pytestmark = pytest.mark.integration

# A separate Redis database, so a sweep beat sends would never land in anyone's queue.
BEAT_REDIS_URL = redis_url(14)
# Neither process below touches the database: the default (SQLite under the data dir) will do.
NO_DATABASE_URL = ""


def _wait_for_log_line(
    log_path: Path, text: str, process: subprocess.Popen[bytes], what: str
) -> None:
    try:
        wait_for(lambda: log_path.exists() and text in log_path.read_text(), 60, what, process)
    except (TimeoutError, RuntimeError) as error:
        raise AssertionError(f"{error}; log:\n{log_path.read_text()[-5000:]}") from error


def test_beat_starts_its_scheduler_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = mosoo_env(data_dir, NO_DATABASE_URL, MOSOO_REDIS_URL=BEAT_REDIS_URL)
    log_path = tmp_path / "beat.log"

    with running(["beat"], env, log_path) as beat:
        _wait_for_log_line(log_path, "beat: Starting", beat, "celery beat to start")
        # The schedule file lives in the data dir, so a restart keeps the timers.
        wait_for(
            lambda: any((data_dir / "run").glob("celerybeat-schedule*")),
            30,
            "the beat schedule file in the data dir",
            beat,
        )
        exit_code = stop_group(beat)

    assert exit_code == 0, log_path.read_text()[-5000:]


def test_control_answers_health_on_its_unix_socket_and_tcp_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    env = mosoo_env(data_dir, NO_DATABASE_URL, MOSOO_CONTROL_PORT=str(port))
    socket_path = data_dir / "run" / "control" / "control.sock"
    log_path = tmp_path / "control.log"
    unix = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)), timeout=5)
    tcp = httpx.Client(timeout=5)

    with unix, tcp, running(["control"], env, log_path) as control:
        _wait_for_log_line(log_path, "control.ready", control, "the control service to be ready")

        over_socket = unix.get("http://control/control/health")
        over_tcp = tcp.get(f"http://127.0.0.1:{port}/control/health")
        assert socket_path.is_socket()

        exit_code = stop_group(control)

    assert over_socket.status_code == 200
    assert over_socket.json() == {"ok": True, "service": "control"}
    assert over_tcp.status_code == 200
    assert over_tcp.json() == {"ok": True, "service": "control"}
    log = log_path.read_text()
    assert exit_code == 0, log[-5000:]
    assert "control.stopped" in log
    assert not socket_path.exists()
