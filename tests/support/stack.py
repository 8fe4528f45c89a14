"""The real runtime for integration tests: `mosoo control` and `mosoo worker` processes
sharing one database, Redis db, master key and data dir with the test process, a Docker
sandbox image, and the scripted model server standing in for the provider."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, environments, identity, sessions, streams, vault
from mosoo_core.runtime.sandbox.image import ensure_sandbox_image
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tasks_client import enqueue_run_dispatch
from tests.support.anthropic_server import ScriptedAnthropicServer
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.processes import (
    console_slot,
    free_port,
    mosoo_env,
    running,
    stop_group,
    stop_groups,
    wait_for,
)

TERMINAL = ("completed", "failed", "cancelled", "expired")


def runtime_env(
    data_dir: Path, database_url: str, redis_db: int, monkeypatch: pytest.MonkeyPatch, **extra: str
) -> dict[str, str]:
    """Settings for the child processes, applied to this process too (so services called
    from the test and the Celery client talk to the same Redis db and vault key)."""
    image = ensure_sandbox_image(
        docker.from_env(timeout=600), base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", "")
    )
    settings_env = {
        "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MOSOO_SANDBOX_BACKEND": "docker",
        "MOSOO_SANDBOX_IMAGE": image,
        "MOSOO_CONTROL_PORT": str(free_port()),
        "MOSOO_DRIVER_HEARTBEAT_INTERVAL_MS": "1000",
        **extra,
    }
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(data_dir))
    reset_settings_cache()
    redis.Redis(db=redis_db).flushdb()
    return mosoo_env(data_dir, database_url, **settings_env)


@dataclass
class RuntimeStack:
    engine: Engine
    model: ScriptedOpenAIServer
    data_dir: Path
    logs: Path
    env: dict[str, str]
    processes: contextlib.ExitStack = field(repr=False)
    started: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # The scripted Anthropic Messages server, for `claude` Agents (`anthropic_key=`).
    anthropic: ScriptedAnthropicServer | None = None

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start `mosoo <args>` (logging to logs/<name>.log) and wait until it is ready."""
        return self.start_together((name, *args))[0]

    def start_together(self, *commands: tuple[str, ...]) -> list[subprocess.Popen[bytes]]:
        """Start each `(name, *args)` at once, then wait until every one is ready: control
        and the worker do not need each other to start, and their imports overlap."""
        launched = []
        for name, *args in commands:
            log = self.logs / f"{name}.log"
            process = self.processes.enter_context(running(args, self.env, log))
            self.started[name] = process
            launched.append((name, args[0], log, process))
        for name, command, log, process in launched:
            _wait_ready(
                name, b"control.ready" if command == "control" else b"worker.ready", log, process
            )
        return [process for *_, process in launched]

    def start_web(self, name: str = "web") -> str:
        """Start `mosoo web` on a console slot with the stack's settings (logging to
        logs/<name>.log); its URL once the API answers `/api/health`."""
        console = self.processes.enter_context(console_slot())
        log = self.logs / f"{name}.log"
        process = self.processes.enter_context(running(["web"], self.env | console.env, log))
        wait_for(lambda: _api_answers(console.url), 600, f"{name} to answer /api/health", process)
        self.started[name] = process
        return console.url

    def print_logs(self) -> None:
        for log in sorted(self.logs.glob("*.log")):
            print(f"--- {log.name}\n" + log.read_text(errors="replace")[-6000:])


@contextlib.contextmanager
def runtime_stack(
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    redis_db: int,
    start_control: bool = True,
    extra_env: dict[str, str] | None = None,
    anthropic_key: str | None = None,
) -> Iterator[RuntimeStack]:
    """With `anthropic_key`, also a scripted Anthropic server that takes only that key."""
    env = runtime_env(tmp_path / "data", database_url, redis_db, monkeypatch, **(extra_env or {}))
    with contextlib.ExitStack() as processes, ScriptedOpenAIServer(models=["test-model"]) as model:
        stack = RuntimeStack(engine, model, tmp_path / "data", tmp_path / "logs", env, processes)
        if anthropic_key is not None:
            stack.anthropic = processes.enter_context(
                ScriptedAnthropicServer(models=["claude-test"], api_key=anthropic_key)
            )
        try:
            worker = ("worker", "worker", "--concurrency", "2")
            stack.start_together(*([("control", "control")] if start_control else []), worker)
            yield stack
        except BaseException:
            stack.print_logs()
            raise
        finally:
            stop_groups(list(stack.started.values()))
            processes.close()
            remove_sandboxes()


def _wait_ready(name: str, marker: bytes, log: Path, process: subprocess.Popen[bytes]) -> None:
    wait_for(lambda: marker in log.read_bytes(), 60, f"{name} to be ready", process)


def _api_answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def bind_unserved_control_socket(stack: RuntimeStack) -> socket.socket:
    """The control socket's path, bound by nobody who answers: a driver there never reports
    ready, so the worker stays in the boot (close it when done)."""
    control_dir = stack.data_dir / "run" / "control"
    control_dir.mkdir(parents=True, exist_ok=True)
    control_dir.chmod(0o755)
    unserved = socket.socket(socket.AF_UNIX)
    unserved.bind(str(control_dir / "control.sock"))
    return unserved


def kill_worker_once_sandbox_created(stack: RuntimeStack) -> None:
    """SIGKILL the worker's process group as soon as it has created a sandbox."""
    worker_log = stack.logs / "worker.log"
    wait_for(lambda: b"sandbox.created" in worker_log.read_bytes(), 60, "the sandbox to be created")
    worker = stack.started["worker"]
    os.killpg(worker.pid, signal.SIGKILL)
    stop_group(worker)


def labelled_containers(*labels: str) -> list[Any]:
    """The containers (running or not) carrying every label, listed without racing a removal.

    The SDK lists ids, then inspects each: a container removed in between (the worker tearing
    a Cattle sandbox down) is a 404, which here means it is gone, so the listing is taken again.
    """
    for _ in range(10):
        try:
            return list(
                docker.from_env().containers.list(all=True, filters={"label": list(labels)})
            )
        except docker.errors.NotFound:
            continue
    raise AssertionError(f"could not list the containers labelled {labels}")


def remove_sandboxes() -> None:
    """Remove this installation's sandboxes through the backend (containers and volumes)."""
    from mosoo_core.runtime.runs import installation_label
    from mosoo_core.runtime.sandbox import get_backend

    backend = get_backend()
    for ref in backend.list_by_label(installation_label()):
        backend.remove(ref)


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    agent_id: str


def make_agent(
    engine: Engine,
    base_url: str,
    provider_key: str,
    *,
    email: str = "e2e@example.com",
    kind: str = "cattle",
    tools: dict[str, str] | None = None,
    environment: environments.EnvironmentChanges | None = None,
    runtime: str = "openai",
) -> Owner:
    """An account whose App has a provider key (pointing at base_url) and a ready Agent,
    bound to a new environment "E2E" with `environment` when it is given. The `claude`
    runtime gets an Anthropic key and the model `claude-test`."""
    provider, model = (
        ("anthropic", "claude-test")
        if runtime == "claude"
        else (
            "openai_compatible",
            "test-model",
        )
    )
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        credential = vault.create_provider_credential(
            db,
            account.id,
            app_id,
            vault.ProviderCredentialInput(
                name=f"Scripted {kind}",
                provider=provider,
                base_url=base_url,
                api_key=provider_key,
                models=[model],
            ),
        )
        agent = agents.create_agent(
            db, account.id, app_id, name=f"E2E {kind}", kind=kind, runtime=runtime
        )
        agents.update_agent(
            db,
            account.id,
            app_id,
            agent.id,
            agents.AgentChanges(
                provider_credential_id=credential.id,
                model=model,
                system_prompt="You are a test agent.",
                tools=tools if tools is not None else {"bash": "allow"},
                environment_id=(
                    environments.create_environment(db, account.id, app_id, "E2E", environment).id
                    if environment is not None
                    else None
                ),
            ),
        )
        db.commit()
        return Owner(account.id, app_id, agent.id)


def new_thread(engine: Engine, owner: Owner) -> str:
    with Session(engine) as db:
        thread = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id)
        db.commit()
        return thread.id


def send(engine: Engine, account_id: str, session_id: str, text: str) -> str:
    """What a front door does: store the message, publish, ask the worker to dispatch."""
    with Session(engine) as db:
        sent = sessions.send_message(db, account_id, session_id, text)
        db.commit()
    streams.publish_events(sent.events)
    enqueue_run_dispatch(sent.run.id)
    return sent.run.id


def wait_run(engine: Engine, run_id: str, timeout: float = 120) -> SessionRun:
    def finished() -> bool:
        with Session(engine) as db:
            run = db.get(SessionRun, run_id)
            return run is not None and run.status in TERMINAL

    wait_for(finished, timeout, f"run {run_id} to finish")
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        return run
