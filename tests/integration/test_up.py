"""`mosoo up` (what `make run` ends with): every process starts, the URL is printed, and one
Ctrl-C stops every child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, console_slot, free_port, mosoo_env, stop_group, wait_for
from tests.support.redis_db import redis_url

pytestmark = pytest.mark.integration


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_starts_everything_prints_the_url_and_ctrl_c_stops_all(
    tmp_path: Path, database_url: str
) -> None:
    with console_slot() as console:
        env = mosoo_env(
            tmp_path / "data",
            database_url,
            MOSOO_CONTROL_PORT=str(free_port()),
            MOSOO_REDIS_URL=redis_url(13),
            **console.env,
        )
        _up_starts_and_stops(tmp_path, env, console.url)


def _up_starts_and_stops(tmp_path: Path, env: dict[str, str], url: str) -> None:
    log_path = tmp_path / "up.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "mosoo_core.cli", "up"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: b"Mosoo is running" in log_path.read_bytes(),
            600,
            "mosoo up to print its URL",
            up,
        )
        print(f"mosoo up answered after {time.monotonic() - started:.1f}s")
        assert url.encode() in log_path.read_bytes()
        assert httpx.get(f"{url}/api/health", timeout=5).json()["ok"] is True
        socket_path = tmp_path / "data" / "run" / "control" / "control.sock"
        wait_for(socket_path.exists, 30, "the control socket")
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path))) as control:
            assert control.get("http://control/control/health").json()["ok"] is True
        wait_for(lambda: b"worker.ready" in log_path.read_bytes(), 60, "the worker")
        wait_for(lambda: b"beat" in log_path.read_bytes().lower(), 60, "beat")
        family = _descendants(up.pid)
        assert len(family) >= 4

        os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C does to the foreground group
        assert up.wait(60) == 0
        wait_for(lambda: not any(_alive(pid) for pid in family), 30, "every child to stop")
        assert not socket_path.exists()
    except Exception:
        print(log_path.read_text(errors="replace")[-6000:])
        raise
    finally:
        stop_group(up)


def test_dev_mailbox_page_is_not_registered_in_production(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MOSOO_ENV": "production",
        "MOSOO_DATA_DIR": str(tmp_path),
        "MOSOO_SECRET_KEY": "x",
    }
    probe = "import mosoo_web.mosoo_web as m; print(sorted(m.app._unevaluated_pages))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "login" in out.stdout and "dev/mailbox" not in out.stdout
    env["MOSOO_ENV"] = "development"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "dev/mailbox" in out.stdout
