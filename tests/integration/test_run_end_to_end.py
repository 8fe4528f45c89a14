"""A message in a thread, end to end: real control, worker, Redis, Docker sandbox and driver,
with the model replaced at its network boundary by the scripted OpenAI-compatible server."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from mosoo_core import agents, identity, sessions, streams, vault
from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.runtime.sandbox.image import ensure_sandbox_image
from mosoo_core.sessions.models import SessionRun
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tasks_client import enqueue_run_dispatch
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import free_port, mosoo_env, running, wait_for

pytestmark = pytest.mark.integration
REDIS_DB = 11
PROVIDER_KEY = "sk-e2e-TOPSECRET-9f8e7d6c5b4a"


@dataclass
class Stack:
    engine: Engine
    model: ScriptedOpenAIServer
    data_dir: Path
    image: str


@pytest.fixture
def stack(engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    client = docker.from_env(timeout=600)
    image = ensure_sandbox_image(client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", ""))
    data_dir = tmp_path / "data"
    master_key = base64.b64encode(os.urandom(32)).decode()
    settings_env = {
        "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "MOSOO_MASTER_KEY": master_key,
        "MOSOO_SANDBOX_BACKEND": "docker",
        "MOSOO_SANDBOX_IMAGE": image,
        "MOSOO_CONTROL_PORT": str(free_port()),
        "MOSOO_DRIVER_HEARTBEAT_INTERVAL_MS": "1000",
    }
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(data_dir))
    reset_settings_cache()
    redis.Redis(db=REDIS_DB).flushdb()
    import importlib

    import mosoo_core.tasks

    importlib.reload(mosoo_core.tasks)  # its Celery app reads the broker URL at import
    env = mosoo_env(data_dir, database_url, **settings_env)
    with ScriptedOpenAIServer(models=["test-model"]) as model, running(["control"], env, tmp_path / "control.log"), running(
        ["worker", "--concurrency", "2"], env, tmp_path / "worker.log"
    ):
        wait_for(lambda: (data_dir / "run" / "control" / "control.sock").exists(), 30, "the control socket")
        wait_for(lambda: b"worker.ready" in (tmp_path / "worker.log").read_bytes(), 60, "the worker")
        try:
            yield Stack(engine=engine, model=model, data_dir=data_dir, image=image)
        except Exception:
            for name in ("control.log", "worker.log"):
                print(f"--- {name}\n" + (tmp_path / name).read_text(errors="replace")[-4000:])
            raise
        finally:
            _remove_sandboxes()
    client.close()


_subjects: set[str] = set()


def _remove_sandboxes() -> None:
    """Remove this module's sandboxes through the backend (containers and their volumes)."""
    from mosoo_core.runtime.sandbox import get_backend

    backend = get_backend()
    for ref in backend.list_by_label({"mosoo.sandbox": "1"}):
        if ref.labels.get(LABEL_SUBJECT, "").split(":", 1)[-1] in _subjects:
            backend.remove(ref)


def _agent(db: Session, base_url: str, *, kind: str = "cattle", tools: dict[str, str] | None = None) -> tuple[str, str, str]:
    account = identity.sign_in_identity(db, provider="email", subject="e2e@example.com", email="e2e@example.com")
    app_id = identity.list_apps(db, account.id)[0].id
    credential = vault.create_provider_credential(
        db, account.id, app_id,
        vault.ProviderCredentialInput(name="Scripted", provider="openai_compatible", base_url=base_url, api_key=PROVIDER_KEY, models=["test-model"]),
    )
    agent = agents.create_agent(db, account.id, app_id, name="E2E", kind=kind)
    agents.update_agent(
        db, account.id, app_id, agent.id, provider_credential_id=credential.id, model="test-model",
        system_prompt="You are a test agent.", tools=tools or {"bash": "allow"},
    )
    _subjects.add(agent.id)
    return account.id, app_id, agent.id


def _send(engine: Engine, account_id: str, session_id: str, text: str) -> str:
    with Session(engine) as db:
        sent = sessions.send_message(db, account_id, session_id, text)
        db.commit()
    streams.publish_events(sent.events)
    enqueue_run_dispatch(sent.run.id)
    return sent.run.id


def _wait_run(engine: Engine, run_id: str, timeout: float = 120) -> SessionRun:
    def finished() -> bool:
        with Session(engine) as db:
            run = db.get(SessionRun, run_id)
            return run is not None and run.status in ("completed", "failed", "cancelled", "expired")

    wait_for(finished, timeout, f"run {run_id} to finish")
    with Session(engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        return run


def test_message_streams_text_and_a_bash_tool_call_in_a_docker_sandbox(stack: Stack) -> None:
    stack.model.add(
        ToolCallsTurn([ToolCall("bash", {"command": "pwd"}, id="call_pwd")]),
        TextTurn("You are in /workspace, an empty working directory.", usage={"prompt_tokens": 20, "completion_tokens": 9}),
    )
    with Session(stack.engine) as db:
        account_id, app_id, agent_id = _agent(db, stack.model.base_url)
        thread = sessions.create_session(db, account_id, app_id, agent_id)
        db.commit()
    _subjects.add(thread.id)
    started = time.monotonic()
    run = _wait_run(stack.engine, _send(stack.engine, account_id, thread.id, "run pwd and tell me what you see"))
    assert run.status == "completed", (run.error_code, run.error_message)
    print(f"message to completed run: {time.monotonic() - started:.2f}s")

    with Session(stack.engine) as db:
        events = sessions.read_events(db, thread.id, limit=1000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq order with no gap"
    types = [e.type for e in events]
    assert types[0] == "user.message" and "run.started" in types and "run.completed" in types
    tool_done = next(e for e in events if e.type == "tool.use.completed")
    assert tool_done.payload["output"].strip().startswith("/workspace") and tool_done.payload["is_error"] is False
    text = "".join(e.payload["text"] for e in events if e.type == "agent.message.delta")
    assert text == "You are in /workspace, an empty working directory."
    assert any(e.type == "usage.updated" for e in events)

    # The key reached the provider, and only through the gateway.
    assert {r.headers["authorization"] for r in stack.model.chat_requests} == {f"Bearer {PROVIDER_KEY}"}
    # Redis carries the same events in the same order.
    streamed = redis.Redis(db=REDIS_DB).xrange(streams.events_stream(thread.id))
    assert [int(f[b"seq"]) for _, f in streamed] == [e.seq for e in events]
    # Cattle: the sandbox is gone once the run is over.
    client = docker.from_env()
    wait_for(
        lambda: not client.containers.list(all=True, filters={"label": f"{LABEL_SUBJECT}=session:{thread.id}"}),
        60, "the Cattle sandbox to be removed",
    )


def test_provider_key_is_nowhere_in_the_sandbox(stack: Stack) -> None:
    stack.model.add(TextTurn("Hello."))
    with Session(stack.engine) as db:
        account_id, app_id, agent_id = _agent(db, stack.model.base_url, kind="pet")
        thread = sessions.create_session(db, account_id, app_id, agent_id)
        db.commit()
    run = _wait_run(stack.engine, _send(stack.engine, account_id, thread.id, "hi"))
    assert run.status == "completed", (run.error_code, run.error_message)
    client = docker.from_env()
    [container] = client.containers.list(filters={"label": f"{LABEL_SUBJECT}=agent:{agent_id}"})
    # The Pet sandbox (and its driver) are still alive: look everywhere a key could hide.
    assert all(PROVIDER_KEY not in item for item in container.attrs["Config"]["Env"] or [])
    processes = container.exec_run(["sh", "-c", "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"], user="0")
    assert processes.exit_code == 0 and b"mosoo" in processes.output.lower()
    assert PROVIDER_KEY.encode() not in processes.output
    # grep reads the needle from a file so that its own command line does not hold it.
    needle = PROVIDER_KEY[:12] + "\n"
    container.exec_run(["sh", "-c", f"printf '{needle}' > /tmp/needle"], user="0")
    found = container.exec_run(
        ["sh", "-c", "grep -rlF -f /tmp/needle / --exclude-dir=proc --exclude-dir=sys --exclude=needle 2>/dev/null; true"], user="0"
    )
    assert found.output.strip() == b"", found.output


def test_worker_killed_while_booting_leaves_a_clear_failure_and_no_container(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from mosoo_core.clock import utcnow
    from mosoo_core.runtime.runs import STUCK_BOOT_AFTER, sweep_stuck_boots
    from tests.support.processes import stop_group

    client = docker.from_env(timeout=600)
    image = ensure_sandbox_image(client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", ""))
    data_dir = tmp_path / "data"
    settings_env = {
        "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MOSOO_SANDBOX_BACKEND": "docker",
        "MOSOO_SANDBOX_IMAGE": image,
    }
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(data_dir))
    reset_settings_cache()
    redis.Redis(db=REDIS_DB).flushdb()
    import importlib

    import mosoo_core.tasks

    importlib.reload(mosoo_core.tasks)
    # A control socket nobody serves: the driver cannot report ready, so the worker stays in
    # the boot long enough to be killed there.
    import socket as socket_module

    (data_dir / "run" / "control").mkdir(parents=True)
    dead_socket = socket_module.socket(socket_module.AF_UNIX)
    dead_socket.bind(str(data_dir / "run" / "control" / "control.sock"))
    log = tmp_path / "worker.log"
    with ScriptedOpenAIServer() as model, running(["worker", "--concurrency", "1"], mosoo_env(data_dir, database_url, **settings_env), log) as worker:
        wait_for(lambda: b"worker.ready" in log.read_bytes(), 60, "the worker")
        with Session(engine) as db:
            account_id, app_id, agent_id = _agent(db, model.base_url)
            thread = sessions.create_session(db, account_id, app_id, agent_id)
            db.commit()
        run_id = _send(engine, account_id, thread.id, "hello")
        wait_for(lambda: b"sandbox.created" in log.read_bytes(), 60, "the sandbox to be created")
        os.killpg(worker.pid, 9)
        stop_group(worker)
    dead_socket.close()
    label = f"{LABEL_SUBJECT}=session:{thread.id}"
    assert client.containers.list(all=True, filters={"label": label}), "the dead worker left its sandbox"
    with Session(engine) as db:
        assert db.get(SessionRun, run_id).status == "booting"  # type: ignore[union-attr]
    # The beat sweep finds the stuck boot.
    assert sweep_stuck_boots(now=utcnow() + STUCK_BOOT_AFTER + timedelta(seconds=1)) == 1
    run = _wait_run(engine, run_id, timeout=5)
    assert (run.status, run.error_code, run.error_retryable) == ("failed", "dispatch_interrupted", True)
    assert "Send the message again" in (run.error_message or "")
    assert client.containers.list(all=True, filters={"label": label}) == []
    with Session(engine) as db:
        assert sessions.get_session(db, account_id, thread.id).status == "idle"
