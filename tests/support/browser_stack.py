"""The real stack for browser journeys: `mosoo web`, `mosoo control` and `mosoo worker` sharing
one database, Redis database, master key and data dir, with Docker sandboxes and the model
replaced at its network boundary by the scripted OpenAI-compatible server."""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import redis

from mosoo_core.runtime.sandbox import LABEL_APP, LABEL_SANDBOX, get_backend
from mosoo_core.runtime.sandbox.image import ensure_sandbox_image
from tests.browser.conftest import WebServer
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.processes import (
    console_slot,
    free_port,
    mosoo_env,
    page_served,
    running,
    stop_groups,
    wait_for,
)


@dataclass
class RunStack:
    web: WebServer
    model: ScriptedOpenAIServer
    logs: dict[str, Path]
    data_dir: Path  # the processes' MOSOO_DATA_DIR (their object store is below it)
    app_ids: set[str] = field(default_factory=set)  # Apps whose sandboxes go when the stack stops

    def print_logs(self) -> None:
        for name, path in self.logs.items():
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            print(f"--- {name} ({path})\n{text[-6000:]}")

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.print_logs()
            raise


@contextlib.contextmanager
def browser_run_stack(
    database_url: str, root: Path, redis_db: int, extra_env: dict[str, str] | None = None
) -> Iterator[RunStack]:
    """Start the three processes (Redis db `redis_db` flushed first, logs under `root`) and
    stop them after, removing the sandboxes of the Apps the test named in `app_ids`."""
    client = docker.from_env(timeout=600)
    try:
        image = ensure_sandbox_image(
            client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", "")
        )
    finally:
        client.close()
    redis.Redis(db=redis_db).flushdb()
    with console_slot() as console, ScriptedOpenAIServer(models=["test-model"]) as model:
        env = mosoo_env(
            root / "data",
            database_url,
            MOSOO_REDIS_URL=f"redis://127.0.0.1:6379/{redis_db}",
            # The web process encrypts the key with it; control decrypts it for the gateway.
            MOSOO_MASTER_KEY=base64.b64encode(os.urandom(32)).decode(),
            MOSOO_SANDBOX_BACKEND="docker",
            MOSOO_SANDBOX_IMAGE=image,
            MOSOO_CONTROL_PORT=str(free_port()),
            MOSOO_DRIVER_HEARTBEAT_INTERVAL_MS="1000",
            **console.env,
            **(extra_env or {}),
        )
        logs = {name: root / f"{name}.log" for name in ("web", "control", "worker")}
        stack = RunStack(
            web=WebServer(url=console.url, database_url=database_url, log=logs["web"]),
            model=model,
            logs=logs,
            data_dir=root / "data",
        )
        try:
            with (
                running(["control"], env, logs["control"]) as control,
                running(["worker", "--concurrency", "2"], env, logs["worker"]) as worker,
                running(["web"], env, logs["web"]) as web,
            ):
                try:
                    with stack.logs_on_failure():
                        wait_for(
                            lambda: b"control.ready" in logs["control"].read_bytes(),
                            30,
                            "control",
                            control,
                        )
                        wait_for(
                            lambda: b"worker.ready" in logs["worker"].read_bytes(),
                            60,
                            "the worker",
                            worker,
                        )
                        wait_for(
                            lambda: page_served(f"{console.url}/login"),
                            600,
                            "the console to be served",
                            web,
                        )
                    yield stack
                finally:
                    stop_groups([web, worker, control])
        finally:
            # Through the backend: it removes each sandbox's workspace volume too.
            backend = get_backend()
            for app_id in stack.app_ids:
                for ref in backend.list_by_label({LABEL_SANDBOX: "1", LABEL_APP: app_id}):
                    backend.remove(ref)
