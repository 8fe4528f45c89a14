"""`mosoo up`: migrate, start web, control, worker and beat, print the URL, stop them together."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType

import httpx

from mosoo_core.logs import configure_logging, get_logger
from mosoo_core.migrations import upgrade
from mosoo_core.settings import get_settings

PROCESSES = ("web", "control", "worker", "beat")
log = get_logger(__name__)


def _start(name: str) -> subprocess.Popen[bytes]:
    # Each child leads its own process group so stopping it also stops what it spawned.
    return subprocess.Popen([sys.executable, "-m", "mosoo_core.cli", name], start_new_session=True)


def _stop(children: dict[str, subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    for child in children.values():
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, child in children.items():
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("up.kill", process=name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def _web_answers(url: str) -> bool:
    """The API is healthy and the console's sign-in page is built and served."""
    try:
        health = httpx.get(f"{url}/api/health", timeout=2)
        page = httpx.get(f"{url}/login", timeout=2, follow_redirects=True)
    except httpx.HTTPError:
        return False
    return health.status_code == 200 and page.status_code == 200 and "<html" in page.text.lower()


def run_all() -> int:
    settings = get_settings()
    configure_logging("up", settings.log_level, settings.log_json)
    started = time.monotonic()
    upgrade()
    children = {name: _start(name) for name in PROCESSES}
    stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    local_url = f"http://127.0.0.1:{settings.web_port}"
    announced = False
    code = 0
    try:
        while not stopping:
            for name, child in children.items():
                if child.poll() is not None:
                    log.error("up.process_exited", process=name, returncode=child.returncode)
                    stopping, code = True, 1
            if not announced and not stopping and _web_answers(local_url):
                announced = True
                seconds = round(time.monotonic() - started, 1)
                log.info("up.ready", url=settings.public_url, seconds=seconds)
                print(
                    f"\n  Mosoo is running: {settings.public_url}  (ready in {seconds}s; Ctrl-C stops it)\n",
                    flush=True,
                )
            time.sleep(0.5)
    finally:
        log.info("up.stopping")
        _stop(children)
    return code
