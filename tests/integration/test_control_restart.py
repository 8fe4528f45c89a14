"""Kill the control process in the middle of a streamed answer and start it again: the run
completes with every event exactly once (ARCHITECTURE.md section 3, "Nothing is lost if a
process dies in the middle").

Real control, worker, Redis and Docker sandbox; the model is the scripted OpenAI-compatible
server. The sandbox sees control's socket through a directory mount, so the running driver
reconnects to the new control (and re-sends what was not acknowledged), and the `openai`
backend retries the model step whose stream died with the old control.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from mosoo_core import agents, identity, sessions, streams, vault
from mosoo_core.runtime.sandbox import LABEL_SUBJECT
from mosoo_core.runtime.sandbox.image import ensure_sandbox_image
from mosoo_core.sessions.models import SessionEvent, SessionRun
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tasks_client import enqueue_run_dispatch
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn
from tests.support.processes import free_port, mosoo_env, running, stop_group, wait_for

pytestmark = pytest.mark.integration
REDIS_DB = 8
PROVIDER_KEY = "sk-restart-0a1b2c3d4e5f"
LONG_ANSWER = [f"word{i} " for i in range(80)]
FINAL_ANSWER = "The whole answer, streamed again after control came back."


@dataclass
class Stack:
    engine: Engine
    model: ScriptedOpenAIServer
    data_dir: Path
    logs: Path
    start_control: Callable[[str], subprocess.Popen[bytes]]


@pytest.fixture
def stack(engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    client = docker.from_env(timeout=600)
    image = ensure_sandbox_image(client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", ""))
    data_dir = tmp_path / "data"
    settings_env = {
        "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
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
    logs = tmp_path / "logs"
    with contextlib.ExitStack() as processes, ScriptedOpenAIServer(models=["test-model"]) as model:

        def start_control(name: str) -> subprocess.Popen[bytes]:
            log = logs / f"{name}.log"
            control = processes.enter_context(running(["control"], env, log))
            wait_for(lambda: b"control.ready" in log.read_bytes(), 30, f"{name} to be ready", control)
            return control

        worker_log = logs / "worker.log"
        worker = processes.enter_context(running(["worker", "--concurrency", "2"], env, worker_log))
        wait_for(lambda: b"worker.ready" in worker_log.read_bytes(), 60, "the worker", worker)
        try:
            yield Stack(engine=engine, model=model, data_dir=data_dir, logs=logs, start_control=start_control)
        except Exception:
            for log in sorted(logs.glob("*.log")):
                print(f"--- {log.name}\n" + log.read_text(errors="replace")[-6000:])
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


def _thread(engine: Engine, base_url: str) -> tuple[str, str]:
    with Session(engine) as db:
        account = identity.sign_in_identity(db, provider="email", subject="restart@example.com", email="restart@example.com")
        app_id = identity.list_apps(db, account.id)[0].id
        credential = vault.create_provider_credential(
            db, account.id, app_id,
            vault.ProviderCredentialInput(
                name="Scripted", provider="openai_compatible", base_url=base_url, api_key=PROVIDER_KEY, models=["test-model"]
            ),
        )
        agent = agents.create_agent(db, account.id, app_id, name="Restart", kind="cattle")
        agents.update_agent(
            db, account.id, app_id, agent.id, provider_credential_id=credential.id, model="test-model",
            system_prompt="You are a test agent.", tools={},
        )
        thread = sessions.create_session(db, account.id, app_id, agent.id)
        ids = account.id, agent.id, thread.id
        db.commit()
    account_id, agent_id, thread_id = ids
    _subjects.update({agent_id, thread_id})
    return account_id, thread_id


def _delta_ids(engine: Engine, session_id: str) -> list[str]:
    with Session(engine) as db:
        return [
            str(source)
            for source in db.exec(
                select(SessionEvent.source_event_id).where(
                    SessionEvent.session_id == session_id, SessionEvent.type == "agent.message.delta"
                ).order_by(col(SessionEvent.seq))
            ).all()
        ]


def test_control_killed_mid_stream_and_restarted_the_run_completes_with_every_event_once(stack: Stack) -> None:
    stack.model.add(TextTurn(LONG_ANSWER, delay=0.1), TextTurn(FINAL_ANSWER))
    control = stack.start_control("control-1")
    account_id, thread_id = _thread(stack.engine, stack.model.base_url)
    with Session(stack.engine) as db:
        sent = sessions.send_message(db, account_id, thread_id, "tell me a long story")
        db.commit()
    streams.publish_events(sent.events)
    enqueue_run_dispatch(sent.run.id)
    run_id = sent.run.id

    wait_for(lambda: len(_delta_ids(stack.engine, thread_id)) >= 5, 120, "the answer to start streaming")
    before_kill = _delta_ids(stack.engine, thread_id)
    os.killpg(control.pid, signal.SIGKILL)  # no shutdown of any kind: the whole group dies
    assert stop_group(control) == -signal.SIGKILL
    assert len(before_kill) < len(LONG_ANSWER), "the first answer finished before the kill"
    time.sleep(1)
    stack.start_control("control-2")
    # The new socket, in the directory the sandbox has mounted, usable by its uid 10001.
    socket_path = stack.data_dir / "run" / "control" / "control.sock"
    assert socket_path.is_socket() and socket_path.stat().st_mode & 0o777 == 0o666
    assert socket_path.parent.stat().st_mode & 0o777 == 0o755

    def finished() -> bool:
        with Session(stack.engine) as db:
            run = db.get(SessionRun, run_id)
            return run is not None and run.status in ("completed", "failed", "cancelled", "expired")

    wait_for(finished, 180, "the run to finish after the restart")
    with Session(stack.engine) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None
        assert (run.status, run.error_code) == ("completed", None), (run.error_code, run.error_message)
        events = sessions.read_events(db, thread_id, limit=10_000)

    # The log: seqs 1..N without a gap, no driver event stored twice.
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    sources = Counter(e.source_event_id for e in events if e.source_event_id)
    assert [source for source, count in sources.items() if count > 1] == []
    types = [e.type for e in events]
    assert types.count("run.started") == 1 and types.count("run.completed") == 1
    assert "run.failed" not in types and "run.cancelled" not in types
    assert not [e for e in events if "driver_lost" in str(e.payload)], "the thread went through driver_lost"

    # The deltas stored before the kill are there exactly once, where they were.
    stored_deltas = [e.source_event_id for e in events if e.type == "agent.message.delta"]
    assert all(Counter(stored_deltas)[source] == 1 for source in before_kill)
    assert stored_deltas[: len(before_kill)] == before_kill

    # The cut message: closed as interrupted, its text exactly its stored deltas (nothing the
    # driver streamed before the kill was lost or doubled on the way); then the retried step.
    completed = [e for e in events if e.type == "agent.message.completed"]
    assert [bool(e.payload.get("interrupted")) for e in completed] == [True, False]
    cut, final = completed
    cut_deltas = [e.payload["text"] for e in events if e.type == "agent.message.delta" and e.payload["message_id"] == cut.payload["message_id"]]
    assert len(cut_deltas) >= len(before_kill)
    assert "".join(cut_deltas) == cut.payload["text"] == "".join(LONG_ANSWER[: len(cut_deltas)])
    final_deltas = [e.payload["text"] for e in events if e.type == "agent.message.delta" and e.payload["message_id"] == final.payload["message_id"]]
    assert "".join(final_deltas) == final.payload["text"] == FINAL_ANSWER
    assert next(e for e in events if e.type == "run.completed").payload["final_text"] == FINAL_ANSWER
    assert types.index("agent.message.completed") < max(i for i, t in enumerate(types) if t == "agent.message.started")

    # The provider saw the cut stream and exactly one retry.
    assert stack.model.streams_aborted == 1 and stack.model.streams_completed == 1
    assert len(stack.model.chat_requests) == 2
    assert {r.headers["authorization"] for r in stack.model.chat_requests} == {f"Bearer {PROVIDER_KEY}"}
    # The same driver carried on: it reconnected to the new control; no second boot.
    worker_log = (stack.logs / "worker.log").read_bytes()
    assert worker_log.count(b"sandbox.created") == 1
    assert b"driver.connected" in (stack.logs / "control-2.log").read_bytes()

    # Cattle: the sandbox is removed once the run is over, by a worker the new control asked.
    client = docker.from_env()
    wait_for(
        lambda: not client.containers.list(all=True, filters={"label": f"{LABEL_SUBJECT}=session:{thread_id}"}),
        60, "the Cattle sandbox to be removed",
    )
