"""The long-running `mosoo` processes start, answer, and stop cleanly on SIGTERM (what a
supervisor or `docker stop` sends)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import redis

from tests.support.processes import free_port, mosoo_env, running, stop_group, wait_for

pytestmark = pytest.mark.integration

# A separate Redis database: beat may publish its schedule there, never into anyone's queue.
BEAT_REDIS_URL = "redis://127.0.0.1:6379/14"
# Neither process below touches the database: the default (SQLite under the data dir) will do.
NO_DATABASE_URL = ""


def _log_has(log_path: Path, text: str) -> bool:
    return log_path.exists() and text in log_path.read_text()


def test_beat_starts_its_scheduler_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    broker = redis.Redis.from_url(BEAT_REDIS_URL)
    broker.flushdb()
    data_dir = tmp_path / "data"
    env = mosoo_env(data_dir, NO_DATABASE_URL, MOSOO_REDIS_URL=BEAT_REDIS_URL, MOSOO_LOG_JSON="false")
    log_path = tmp_path / "beat.log"

    try:
        with running(["beat"], env, log_path) as beat:
            wait_for(lambda: _log_has(log_path, "beat: Starting"), 60, "celery beat to start", beat)
            # The schedule file lives in the data dir, so a restart keeps the timers.
            wait_for(
                lambda: any((data_dir / "run").glob("celerybeat-schedule*")),
                30,
                "the beat schedule file",
                beat,
            )
            exit_code = stop_group(beat)
    finally:
        broker.flushdb()
        broker.close()

    assert exit_code == 0, log_path.read_text()[-5000:]


def test_control_answers_health_on_its_unix_socket_and_tcp_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    env = mosoo_env(data_dir, NO_DATABASE_URL, MOSOO_CONTROL_PORT=str(port))
    socket_path = data_dir / "run" / "control.sock"
    log_path = tmp_path / "control.log"
    unix = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)), timeout=5)
    tcp = httpx.Client(timeout=5)

    with unix, tcp, running(["control"], env, log_path) as control:
        wait_for(lambda: _log_has(log_path, "control.ready"), 60, "the control service to be ready", control)

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
