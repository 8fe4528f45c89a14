"""Attachments and artifacts with real parts: the object store on the filesystem and on S3
(moto's server on loopback), both sandbox backends, and one whole run through control, the
worker, a Docker Pet sandbox and the driver, with the model scripted at its network edge."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import docker
import pytest
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import agents, files, identity, sessions, streams
from mosoo_core.errors import InvalidInput
from mosoo_core.files import get_store
from mosoo_core.runtime import attachments
from mosoo_core.runtime.runs import installation_label, record_run_outputs
from mosoo_core.runtime.sandbox import (
    LABEL_SUBJECT,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
    get_backend,
)
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend
from mosoo_core.runtime.sandbox.image import ensure_process_runtime, ensure_sandbox_image
from mosoo_core.runtime.sandbox.process_backend import ProcessBackend
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import SessionRun
from mosoo_core.tasks_client import enqueue_run_dispatch
from tests.support.openai_server import TextTurn, ToolCall, ToolCallsTurn
from tests.support.processes import free_port, wait_for
from tests.support.redis_db import db_number, streamed_seqs
from tests.support.stack import make_agent, new_thread, runtime_stack, wait_run

pytestmark = pytest.mark.integration
REDIS_DB = db_number(3)
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    agent_id: str


def _owner(db: Session, email: str = "files-it@example.com") -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    agent = agents.create_agent(db, account.id, app_id, name="Filer", kind="cattle")
    return Owner(account.id, app_id, agent.id)


def _upload(
    db: Session, owner: Owner, data: bytes, name: str, session_id: str | None = None
) -> files.FileView:
    return files.upload_file(
        db,
        owner.account_id,
        owner.app_id,
        owner.agent_id,
        io.BytesIO(data),
        name,
        session_id=session_id,
    )


@pytest.fixture
def redis_db(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_REDIS_URL", f"redis://127.0.0.1:6379/{REDIS_DB}")
    reset_settings_cache()
    redis.Redis(db=REDIS_DB).flushdb()


# --- the store: a deleted thread's objects go, on the filesystem and on S3 --------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["filesystem", "s3"])
def store_kind(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> str:
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = f"mosoo-files-{tmp_path.name.lower().replace('_', '-')[:30]}"
        settings = {
            "MOSOO_S3_BUCKET": bucket,
            "MOSOO_S3_ENDPOINT_URL": endpoint,
            "MOSOO_S3_REGION": "us-east-1",
            "MOSOO_S3_ACCESS_KEY_ID": "test",
            "MOSOO_S3_SECRET_ACCESS_KEY": "test",
        }
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        reset_settings_cache()
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        ).create_bucket(Bucket=bucket)
    return str(request.param)


def test_deleting_a_threads_files_removes_its_objects_from_the_store(
    db: Session, store_kind: str
) -> None:
    store = get_store()
    assert type(store).__name__ == {"filesystem": "FilesystemStore", "s3": "S3Store"}[store_kind]
    owner = _owner(db)
    thread_id = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
    other_thread = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
    big = os.urandom(3 * 1024 * 1024 + 5)  # more than one chunk (and one S3 multipart part)
    mine = _upload(db, owner, big, "big.bin", thread_id)
    shared = _upload(db, owner, b"shared", "shared.txt", thread_id)
    _upload(db, owner, b"shared", "copy.txt", other_thread)
    db.commit()
    key_of = {row.id: row.object_key for row in db.exec(select(StoredFile)).all()}
    assert store.exists(key_of[mine.id]) and store.exists(key_of[shared.id])
    _, handle = files.open_file(db, owner.account_id, mine.id)
    assert b"".join(files.iter_chunks(handle)) == big

    keys = files.remove_thread_files(db, thread_id)
    db.commit()
    assert files.purge_objects(keys) == 1
    assert not store.exists(key_of[mine.id])
    assert store.exists(key_of[shared.id])  # the other thread's copy still uses it

    files.delete_file(
        db, owner.account_id, files.list_thread_files(db, owner.account_id, other_thread)[0].id
    )
    db.commit()
    assert not store.exists(key_of[shared.id])


# --- both sandbox backends: read-only delivery, removal, artifacts ---------------------------


@pytest.fixture(scope="module")
def host_tmp() -> Iterator[Path]:
    """Traversable by the sandbox user (uid 10001): pytest's tmp_path is 0700."""
    path = Path(tempfile.mkdtemp(prefix="mosoo-files-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["docker", "process"])
def backend(request: pytest.FixtureRequest, host_tmp: Path) -> SandboxBackend:
    if request.param == "docker":
        client = docker.from_env(timeout=600)
        image = ensure_sandbox_image(
            client, base_image=os.environ.get("MOSOO_SANDBOX_BASE_IMAGE", "")
        )
        return DockerBackend(client, image=image, attachments_root=host_tmp / "docker-attachments")
    runtime = ensure_process_runtime(ROOT / "data" / "sandbox-runtime")
    return ProcessBackend(host_tmp / "sandboxes", runtime_dir=runtime)


@pytest.fixture
def sandbox(backend: SandboxBackend) -> Iterator[SandboxRef]:
    ref = backend.create(
        SandboxSpec(
            subject="session:files-test", app_id="app_files_test", labels={"mosoo.test": "1"}
        )
    )
    yield ref
    backend.remove(ref)


def _sh(backend: SandboxBackend, ref: SandboxRef, script: str) -> tuple[int, str]:
    result = backend.exec(ref, ["sh", "-c", script], timeout=60)
    return result.exit_code, result.stdout_text + result.stderr_text


def test_attachments_are_delivered_read_only_and_removed(
    engine: Engine, backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    with Session(engine, expire_on_commit=False) as db:
        owner = _owner(db)
        thread_id = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
        report = _upload(db, owner, b"a,b\n1,2\n", "report.csv")
        odd = _upload(db, owner, b"odd", 'it\'s a "name" $(x).txt')
        run_id = sessions.send_message(
            db, owner.account_id, thread_id, "read", file_ids=[report.id, odd.id]
        ).run.id
        db.commit()

    manifest = attachments.deliver_attachments(backend, sandbox, run_id)
    path = f"/mnt/attachments/{report.id}/report.csv"
    assert manifest[0] == {
        "file_id": report.id,
        "name": "report.csv",
        "mime_type": "text/csv",
        "size": 8,
        "path": path,
    }
    assert _sh(backend, sandbox, f"cat {path}") == (0, "a,b\n1,2\n")
    assert backend.exec(sandbox, ["cat", manifest[1]["path"]]).stdout_text == "odd"
    for attempt in (
        f"echo x >> {path}",
        f"rm -f {path}",
        f"rm -rf /mnt/attachments/{report.id}",
        f"chmod 666 {path}",
        f"mv {path} /tmp/x",
        f"touch /mnt/attachments/{report.id}/new",
        "touch /mnt/attachments/new",
    ):
        assert _sh(backend, sandbox, attempt)[0] != 0, attempt
    assert _sh(backend, sandbox, f"cat {path}") == (0, "a,b\n1,2\n")

    assert attachments.remove_attachments(backend, sandbox, [report.id, odd.id]) == 2
    assert _sh(backend, sandbox, f"test -e {path} || echo gone") == (0, "gone\n")
    assert _sh(backend, sandbox, "ls -A /mnt/attachments") == (0, "")


def test_a_shared_sandbox_drops_attachments_of_runs_that_are_over(
    engine: Engine, backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    with Session(engine, expire_on_commit=False) as db:
        owner = _owner(db)
        done_thread = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
        busy_thread = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
        old = _upload(db, owner, b"old", "old.txt")
        new = _upload(db, owner, b"new", "new.txt")
        done_run = sessions.send_message(
            db, owner.account_id, done_thread, "a", file_ids=[old.id]
        ).run.id
        busy_run = sessions.send_message(
            db, owner.account_id, busy_thread, "b", file_ids=[new.id]
        ).run.id
        db.commit()
    attachments.deliver_attachments(backend, sandbox, done_run)
    attachments.deliver_attachments(backend, sandbox, busy_run)
    with Session(engine) as db:
        driver_plane.finish_run(
            db, db.get(SessionRun, done_run), "failed", code="driver_lost", message="gone"
        )  # type: ignore[arg-type]
        db.commit()
    assert attachments.remove_stale_attachments(backend, sandbox) == 1
    assert _sh(backend, sandbox, "ls /mnt/attachments") == (0, f"{new.id}\n")


def _events(engine: Engine, thread_id: str, kind: str) -> list[sessions.StoredEvent]:
    with Session(engine) as db:
        return [e for e in driver_plane.read_events(db, thread_id, limit=1000) if e.type == kind]


def test_outputs_become_artifacts_once_and_again_when_changed(
    engine: Engine, backend: SandboxBackend, sandbox: SandboxRef, redis_db: None
) -> None:
    with Session(engine, expire_on_commit=False) as db:
        owner = _owner(db)
        thread_id = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
        run_id = sessions.send_message(db, owner.account_id, thread_id, "write").run.id
        db.commit()
    assert record_run_outputs(backend, sandbox, run_id) == []  # no outputs folder yet

    script = (
        "mkdir -p outputs/sub && printf '# Summary\\n' > outputs/summary.md && printf '1,2' > outputs/sub/data.csv"
        " && ln -s /etc/passwd outputs/link && mkfifo outputs/pipe && touch outputs/empty.txt"
    )
    assert _sh(backend, sandbox, script)[0] == 0
    recorded = record_run_outputs(backend, sandbox, run_id)
    assert sorted((f.path, f.name, f.size) for f in recorded) == [
        ("empty.txt", "empty.txt", 0),
        ("sub/data.csv", "data.csv", 3),
        ("summary.md", "summary.md", 10),
    ]
    assert {f.kind for f in recorded} == {"artifact"} and {f.run_id for f in recorded} == {run_id}
    summary = next(f for f in recorded if f.path == "summary.md")
    assert summary.media_type == "text/markdown"
    with Session(engine) as db:
        _, handle = files.open_file(db, owner.account_id, summary.id)
        assert b"".join(files.iter_chunks(handle)) == b"# Summary\n"
    (event,) = _events(engine, thread_id, "session_files.updated")
    assert event.run_id == run_id and event.payload["run_id"] == run_id
    assert sorted(f["path"] for f in event.payload["files"]) == [
        "empty.txt",
        "sub/data.csv",
        "summary.md",
    ]
    assert event.seq in streamed_seqs(redis.Redis(db=REDIS_DB), thread_id)

    # Nothing changed: nothing recorded, no event.
    assert record_run_outputs(backend, sandbox, run_id) == []
    assert len(_events(engine, thread_id, "session_files.updated")) == 1

    # A changed file updates its row; the old content's object goes.
    with Session(engine, expire_on_commit=False) as db:
        driver_plane.finish_run(db, db.get(SessionRun, run_id), "completed")  # type: ignore[arg-type]
        second_run = sessions.send_message(db, owner.account_id, thread_id, "again").run.id
        db.commit()
    old_key = files.blob_key(owner.app_id, summary.sha256)
    assert _sh(backend, sandbox, "printf '# Better\\n' > outputs/summary.md")[0] == 0
    (updated,) = record_run_outputs(backend, sandbox, second_run)
    assert (updated.id, updated.run_id, updated.size) == (summary.id, second_run, 9)
    assert not get_store().exists(old_key)
    assert len(_events(engine, thread_id, "session_files.updated")) == 2


def test_a_shared_pet_workspace_gives_a_thread_only_what_its_run_wrote(
    engine: Engine, backend: SandboxBackend, sandbox: SandboxRef, redis_db: None
) -> None:
    with Session(engine, expire_on_commit=False) as db:
        owner = _owner(db)
        thread_id = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
        run_id = sessions.send_message(db, owner.account_id, thread_id, "write").run.id
        run = db.get(SessionRun, run_id)
        run.snapshot = {"kind": "pet"}  # type: ignore[union-attr]
        db.add(run)
        db.commit()
    script = "mkdir -p outputs && echo old > outputs/old.txt && touch -d '2020-01-01' outputs/old.txt && echo new > outputs/new.txt"
    assert _sh(backend, sandbox, script)[0] == 0
    assert [f.path for f in record_run_outputs(backend, sandbox, run_id)] == ["new.txt"]


# --- one whole run ---------------------------------------------------------------------------


def test_a_pet_agent_reads_its_attachment_cannot_change_it_and_its_output_becomes_an_artifact(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with runtime_stack(engine, database_url, tmp_path, monkeypatch, redis_db=REDIS_DB) as stack:
        owner = make_agent(stack.engine, stack.model.base_url, "sk-files-e2e", kind="pet")
        thread_id = new_thread(stack.engine, owner)
        with Session(stack.engine, expire_on_commit=False) as db:
            notes = files.upload_file(
                db,
                owner.account_id,
                owner.app_id,
                owner.agent_id,
                io.BytesIO(b"Mosoo ships files.\n"),
                "notes.txt",
                "text/plain",
                session_id=thread_id,
            )
            db.commit()
        path = f"/mnt/attachments/{notes.id}/notes.txt"
        stack.model.add(
            ToolCallsTurn([ToolCall("bash", {"command": f"cat {path}"}, id="call_cat")]),
            ToolCallsTurn(
                [
                    ToolCall(
                        "bash",
                        {
                            "command": (
                                f"(echo tamper >> {path}) 2>/dev/null && echo WRITE_OK || echo WRITE_DENIED; "
                                f"rm -f {path} 2>/dev/null && echo RM_OK || echo RM_DENIED"
                            )
                        },
                        id="call_tamper",
                    )
                ]
            ),
            ToolCallsTurn(
                [
                    ToolCall(
                        "bash",
                        {
                            "command": (
                                f"mkdir -p outputs && {{ echo '# Summary'; cat {path}; }} > outputs/summary.md && echo written"
                            )
                        },
                        id="call_write",
                    )
                ]
            ),
            TextTurn("Summarised into outputs/summary.md."),
        )

        with Session(stack.engine) as db:
            sent = sessions.send_message(
                db, owner.account_id, thread_id, "summarise the file", file_ids=[notes.id]
            )
            db.commit()
        streams.publish_events(sent.events)
        enqueue_run_dispatch(sent.run.id)
        run = wait_run(stack.engine, sent.run.id)
        assert run.status == "completed", (run.error_code, run.error_message)

        texts = [
            e.payload["output"] for e in _events(stack.engine, thread_id, "tool.use.completed")
        ]
        assert texts[0].strip() == "Mosoo ships files.", texts
        assert "WRITE_DENIED" in texts[1] and "RM_DENIED" in texts[1], texts
        assert texts[2].strip() == "written", texts
        # The driver told the model where the file is.
        first_request = stack.model.chat_requests[0].messages
        assert any(path in str(m.get("content")) for m in first_request if m.get("role") == "user")

        wait_for(
            lambda: bool(_events(stack.engine, thread_id, "session_files.updated")),
            60,
            "the artifacts to be recorded",
        )
        (event,) = _events(stack.engine, thread_id, "session_files.updated")
        assert [f["path"] for f in event.payload["files"]] == ["summary.md"]
        with Session(stack.engine) as db:
            artifact = files.list_files(db, owner.account_id, owner.app_id, kind="artifact")
            assert [(f.path, f.run_id, f.session_id) for f in artifact] == [
                ("summary.md", run.id, thread_id)
            ]
            _, handle = files.open_file(db, owner.account_id, artifact[0].id)
            assert b"".join(files.iter_chunks(handle)) == b"# Summary\nMosoo ships files.\n"
        assert event.payload["files"][0]["id"] == artifact[0].id

        # The Pet sandbox stays, without the attachment of the finished message.
        backend = get_backend()
        (pet,) = backend.list_by_label(
            {LABEL_SUBJECT: f"agent:{owner.agent_id}", **installation_label()}
        )
        gone = backend.exec(pet, ["sh", "-c", f"test -e {path} || echo gone"], timeout=30)
        assert gone.stdout_text == "gone\n"
        assert backend.exec(pet, ["cat", "/workspace/outputs/summary.md"]).exit_code == 0

        # And it can no longer be named on another thread.
        other = new_thread(stack.engine, owner)
        with (
            Session(stack.engine) as db,
            pytest.raises(InvalidInput, match="belongs to another thread"),
        ):
            sessions.send_message(db, owner.account_id, other, "use it", file_ids=[notes.id])


def test_removing_a_sandbox_removes_its_attachments_folder(backend: SandboxBackend) -> None:
    ref = backend.create(
        SandboxSpec(
            subject="session:files-test", app_id="app_files_test", labels={"mosoo.test": "1"}
        )
    )
    folder = backend.attachments_dir(ref)
    (folder / "01FILE").mkdir(mode=0o755)
    (folder / "01FILE" / "a.txt").write_text("a")
    (folder / "01FILE" / "a.txt").chmod(0o444)
    (folder / "01FILE").chmod(0o555)
    backend.remove(ref)
    assert not folder.exists()
