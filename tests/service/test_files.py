"""File records: uploads (names, types, limits, dedupe), binding attachments to messages,
ownership, listing and deletion with the objects in the store."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, select

from mosoo_core import agents, files, identity, sessions
from mosoo_core.errors import InvalidInput, NotFound, PayloadTooLarge
from mosoo_core.files import get_store
from mosoo_core.files.service import spool, spool_dir
from mosoo_core.runtime.runs import delete_agent_everywhere
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import SessionRun

MiB = 1024 * 1024


@dataclass(frozen=True)
class Owner:
    account_id: str
    app_id: str
    agent_id: str


def _owner(db: Session, email: str = "files@example.com") -> Owner:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = identity.list_apps(db, account.id)[0].id
    agent = agents.create_agent(db, account.id, app_id, name="Filer", kind="cattle")
    return Owner(account.id, app_id, agent.id)


def _thread(db: Session, owner: Owner, agent_id: str | None = None) -> str:
    return sessions.create_session(
        db, owner.account_id, owner.app_id, agent_id or owner.agent_id
    ).id


def _upload(
    db: Session,
    owner: Owner,
    data: bytes = b"hello",
    name: str = "notes.txt",
    *,
    session_id: str | None = None,
    media_type: str | None = None,
) -> files.FileView:
    return files.upload_file(
        db,
        owner.account_id,
        owner.app_id,
        owner.agent_id,
        io.BytesIO(data),
        name,
        media_type,
        session_id=session_id,
    )


def _blobs(app_id: str) -> list[Path]:
    folder = get_store().root / app_id / "blobs"  # type: ignore[attr-defined]
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.fixture
def owner(db: Session) -> Owner:
    return _owner(db)


# --- names and types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("../x", "x"),
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("a\\b", "b"),
        ("C:\\Users\\me\\report.pdf", "report.pdf"),
        ("re\x00port.txt", "report.txt"),
        ("line\nbreak\t.txt", "linebreak.txt"),
        ("invoice\u202etxt.exe", "invoicetxt.exe"),
        ("\u2066hidden\u2069.md", "hidden.md"),
        ("pay\u200bpal\u200d.html", "paypal.html"),
        ("\ufeffbom.csv", "bom.csv"),
        ("cafe\u0301.txt", "caf\u00e9.txt"),  # NFC
        ("  spaced.txt  ", "spaced.txt"),
    ],
)
def test_hostile_names_are_reduced_to_a_safe_base_name(
    db: Session, owner: Owner, raw: str, expected: str
) -> None:
    uploaded = _upload(db, owner, name=raw)
    assert uploaded.name == expected
    assert db.get(StoredFile, uploaded.id).name == expected  # type: ignore[union-attr]


@pytest.mark.parametrize("raw", ["", ".", "..", "../..", "dir/", "\x00", "\u202e\u200b", "a/.."])
def test_names_with_nothing_usable_left_are_refused(db: Session, owner: Owner, raw: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        _upload(db, owner, name=raw)
    assert refused.value.field == "name"
    assert db.exec(select(StoredFile)).all() == []


def test_a_1000_character_name_is_cut_to_255_bytes_keeping_its_extension(
    db: Session, owner: Owner
) -> None:
    assert len(_upload(db, owner, name="a" * 1000 + ".txt").name.encode()) == 255
    multibyte = _upload(db, owner, name="\u00e9" * 1000 + ".md").name
    assert len(multibyte.encode()) <= 255 and multibyte.endswith(".md")
    assert multibyte.encode().decode() == multibyte  # never cut inside a character
    no_extension = _upload(db, owner, name="b" * 1000).name
    assert no_extension == "b" * 255


@pytest.mark.parametrize(
    ("name", "given", "expected"),
    [
        ("notes.txt", "text/plain; charset=utf-8", "text/plain"),
        ("photo.png", None, "image/png"),
        ("photo.png", "not a type", "image/png"),
        ("data.unknownext", None, "application/octet-stream"),
        ("data.bin", "Application/JSON", "application/json"),
        # Valid by RFC 6838 (127 + 1 + 127) but longer than the column holds (PostgreSQL refused it).
        ("photo.png", "a" * 127 + "/" + "b" * 127, "image/png"),
    ],
)
def test_media_type_comes_from_a_valid_given_type_else_the_name(
    db: Session, owner: Owner, name: str, given: str | None, expected: str
) -> None:
    assert _upload(db, owner, name=name, media_type=given).media_type == expected


# --- size and storage ------------------------------------------------------------------------


class _Generated(io.RawIOBase):
    """A reader producing `size` bytes on demand: never a 64 MiB bytes object."""

    def __init__(self, size: int) -> None:
        self.remaining = size
        self.served = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = min(self.remaining, 1024 * 1024 if size < 0 else size)
        self.remaining -= size
        self.served += size
        return b"\x07" * size


def test_64_mib_plus_one_byte_is_refused_and_leaves_nothing(db: Session, owner: Owner) -> None:
    source = _Generated(64 * MiB + 1)
    with pytest.raises(PayloadTooLarge):
        files.upload_file(db, owner.account_id, owner.app_id, owner.agent_id, source, "big.bin")  # type: ignore[arg-type]
    assert db.exec(select(StoredFile)).all() == []
    assert _blobs(owner.app_id) == []
    assert list(spool_dir().iterdir()) == []


def test_the_limit_is_counted_while_reading(db: Session) -> None:
    source = _Generated(10 * MiB)
    with pytest.raises(PayloadTooLarge):
        spool(source, limit=2 * MiB)  # type: ignore[arg-type]
    assert source.served <= 3 * MiB  # stopped right after passing the limit, not read to the end
    exact = spool(_Generated(2 * MiB), limit=2 * MiB)  # type: ignore[arg-type]
    assert exact.size == 2 * MiB
    exact.path.unlink()


def test_same_content_is_stored_once_per_app(db: Session, owner: Owner) -> None:
    first = _upload(db, owner, b"same bytes", "a.txt")
    second = _upload(db, owner, b"same bytes", "b.txt")
    other = _upload(db, owner, b"other bytes", "c.txt")
    assert first.id != second.id and first.sha256 == second.sha256 != other.sha256
    assert len(_blobs(owner.app_id)) == 2
    rows = {row.id: row for row in db.exec(select(StoredFile)).all()}
    assert (
        rows[first.id].object_key
        == rows[second.id].object_key
        == f"{owner.app_id}/blobs/sha256/{first.sha256}"
    )
    view, handle = files.open_file(db, owner.account_id, second.id)
    assert b"".join(files.iter_chunks(handle)) == b"same bytes" and view.size == 10
    assert "object_key" not in view.to_public()


# --- threads and messages --------------------------------------------------------------------


def test_a_message_binds_its_attachments_to_the_thread_and_run(db: Session, owner: Owner) -> None:
    thread_id = _thread(db, owner)
    uploaded = _upload(db, owner, b"a,b\n1,2\n", "report.csv")
    sent = sessions.send_message(
        db, owner.account_id, thread_id, "summarise it", file_ids=[uploaded.id]
    )
    manifest = [{"file_id": uploaded.id, "name": "report.csv", "media_type": "text/csv", "size": 8}]
    assert db.get(SessionRun, sent.run.id).attachments == manifest  # type: ignore[union-attr]
    message = next(e for e in sent.events if e.type == "user.message")
    assert message.payload == {"text": "summarise it", "attachments": manifest}
    bound = files.get_file(db, owner.account_id, uploaded.id)
    assert (bound.session_id, bound.run_id) == (thread_id, sent.run.id)
    assert [f.id for f in files.list_thread_files(db, owner.account_id, thread_id)] == [uploaded.id]


def test_a_file_of_another_thread_cannot_be_attached(db: Session, owner: Owner) -> None:
    first, second = _thread(db, owner), _thread(db, owner)
    uploaded = _upload(db, owner, session_id=first)
    with pytest.raises(InvalidInput, match="belongs to another thread"):
        sessions.send_message(db, owner.account_id, second, "use it", file_ids=[uploaded.id])
    used = _upload(db, owner, b"used")
    sessions.send_message(db, owner.account_id, first, "bind it", file_ids=[used.id])
    driver_plane.finish_run(db, sessions.active_run(db, first), "completed")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="belongs to another thread"):
        sessions.send_message(db, owner.account_id, second, "use it", file_ids=[used.id])
    assert sessions.active_run(db, second) is None


def test_another_owners_file_is_not_found(db: Session, owner: Owner) -> None:
    stranger = _owner(db, "stranger@example.com")
    theirs = _upload(db, stranger, b"secret")
    thread_id = _thread(db, owner)
    with pytest.raises(NotFound):
        sessions.send_message(db, owner.account_id, thread_id, "use it", file_ids=[theirs.id])
    for call in (files.get_file, files.open_file, files.delete_file):
        with pytest.raises(NotFound):
            call(db, owner.account_id, theirs.id)
    with pytest.raises(NotFound):  # uploading to someone else's agent or App
        files.upload_file(
            db, owner.account_id, stranger.app_id, stranger.agent_id, io.BytesIO(b"x"), "x.txt"
        )
    with pytest.raises(NotFound):
        files.upload_file(
            db, owner.account_id, owner.app_id, stranger.agent_id, io.BytesIO(b"x"), "x.txt"
        )
    with pytest.raises(NotFound):  # their thread
        _upload(db, owner, session_id=_thread(db, stranger))
    assert files.list_files(db, owner.account_id, owner.app_id) == []


def test_a_file_of_another_agent_of_the_same_app_is_not_found(db: Session, owner: Owner) -> None:
    other_agent = agents.create_agent(
        db, owner.account_id, owner.app_id, name="Other", kind="cattle"
    )
    theirs = files.upload_file(
        db, owner.account_id, owner.app_id, other_agent.id, io.BytesIO(b"x"), "x.txt"
    )
    with pytest.raises(NotFound):
        sessions.send_message(
            db, owner.account_id, _thread(db, owner), "use it", file_ids=[theirs.id]
        )
    with pytest.raises(NotFound):  # a thread of another agent
        _upload(db, owner, session_id=_thread(db, owner, other_agent.id))


def test_a_thread_holds_at_most_100_attachments(db: Session, owner: Owner) -> None:
    thread_id = _thread(db, owner)
    for number in range(100):
        _upload(db, owner, f"{number}".encode(), f"{number}.txt", session_id=thread_id)
    with pytest.raises(InvalidInput, match="at most 100"):
        _upload(db, owner, b"one more", "101.txt", session_id=thread_id)
    loose = _upload(db, owner, b"loose", "loose.txt")
    with pytest.raises(InvalidInput, match="at most 100"):
        sessions.send_message(db, owner.account_id, thread_id, "and this", file_ids=[loose.id])
    # The ones already on the thread can still be named again.
    bound = files.list_thread_files(db, owner.account_id, thread_id)[:3]
    sent = sessions.send_message(
        db, owner.account_id, thread_id, "again", file_ids=[f.id for f in bound]
    )
    assert len(db.get(SessionRun, sent.run.id).attachments) == 3  # type: ignore[union-attr]


def test_a_message_names_at_most_20_files(db: Session, owner: Owner) -> None:
    ids = [_upload(db, owner, f"{n}".encode(), f"{n}.txt").id for n in range(21)]
    with pytest.raises(InvalidInput, match="at most 20"):
        sessions.send_message(db, owner.account_id, _thread(db, owner), "all", file_ids=ids)


# --- listing ---------------------------------------------------------------------------------


def test_listing_filters_by_thread_kind_name_and_ids(db: Session, owner: Owner) -> None:
    thread_id = _thread(db, owner)
    report = _upload(db, owner, b"1", "Quarterly_Report.pdf", session_id=thread_id)
    photo = _upload(db, owner, b"2", "photo.png")
    every = files.list_files(db, owner.account_id, owner.app_id)
    assert [f.id for f in every] == [photo.id, report.id]  # newest first
    assert [
        f.id for f in files.list_files(db, owner.account_id, owner.app_id, session_id=thread_id)
    ] == [report.id]
    assert [f.id for f in files.list_files(db, owner.account_id, owner.app_id, query="report")] == [
        report.id
    ]
    assert (
        files.list_files(db, owner.account_id, owner.app_id, query="%") == []
    )  # no wildcard injection
    assert files.list_files(db, owner.account_id, owner.app_id, kind="artifact") == []
    assert [f.id for f in files.list_files(db, owner.account_id, owner.app_id, ids=[photo.id])] == [
        photo.id
    ]
    with pytest.raises(InvalidInput):
        files.list_files(db, owner.account_id, owner.app_id, kind="other")


# --- deletion --------------------------------------------------------------------------------


def test_deleting_a_file_removes_its_object_once_no_row_uses_it(db: Session, owner: Owner) -> None:
    thread_id = _thread(db, owner)
    first = _upload(db, owner, b"shared", "a.txt", session_id=thread_id)
    second = _upload(db, owner, b"shared", "b.txt")
    db.commit()
    with pytest.raises(NotFound):  # not a file of that thread
        files.delete_file(db, owner.account_id, second.id, session_id=thread_id)
    files.delete_file(db, owner.account_id, first.id, session_id=thread_id)
    db.commit()
    assert len(_blobs(owner.app_id)) == 1  # the other row still uses it
    files.delete_file(db, owner.account_id, second.id)
    assert len(_blobs(owner.app_id)) == 1  # not before the commit
    db.commit()
    assert _blobs(owner.app_id) == []
    with pytest.raises(NotFound):
        files.get_file(db, owner.account_id, second.id)


def test_the_sweep_removes_day_old_unsent_uploads_and_stale_spool_files(
    db: Session, owner: Owner
) -> None:
    unsent = _upload(db, owner, b"never sent", "chip.txt")
    fresh = _upload(db, owner, b"just uploaded", "fresh.txt")
    thread_id = _thread(db, owner)
    sent = _upload(db, owner, b"named by a message", "sent.txt", session_id=thread_id)
    db.commit()
    old_spool = spool_dir() / "upload-crashed"
    old_spool.write_bytes(b"partial")
    os.utime(old_spool, (time.time() - 7200, time.time() - 7200))
    new_spool = spool_dir() / "upload-in-progress"
    new_spool.write_bytes(b"partial")
    later = unsent.created_at + timedelta(hours=24, minutes=1)
    for row in db.exec(select(StoredFile).where(StoredFile.id == fresh.id)).all():
        row.created_at = later - timedelta(minutes=5)  # uploaded minutes before the sweep
        db.add(row)
    db.commit()

    assert files.sweep_files(db, now=later) == 2  # the unsent upload and the crashed spool file
    assert len(_blobs(owner.app_id)) == 3  # objects go after the commit
    db.commit()
    with pytest.raises(NotFound):
        files.get_file(db, owner.account_id, unsent.id)
    assert files.get_file(db, owner.account_id, fresh.id).name == "fresh.txt"
    assert files.get_file(db, owner.account_id, sent.id).name == "sent.txt"
    assert len(_blobs(owner.app_id)) == 2
    assert not old_spool.exists() and new_spool.exists()
    new_spool.unlink()


def test_a_rolled_back_delete_keeps_the_object(db: Session, owner: Owner) -> None:
    uploaded = _upload(db, owner, b"keep me")
    db.commit()
    files.delete_file(db, owner.account_id, uploaded.id)
    db.rollback()
    _upload(db, owner, b"something else", "other.txt")
    db.commit()  # the delete's purge runs now, and finds the row still there
    assert len(_blobs(owner.app_id)) == 2
    assert files.get_file(db, owner.account_id, uploaded.id).name == "notes.txt"


def test_removing_a_thread_files_returns_the_keys_only_it_used(db: Session, owner: Owner) -> None:
    thread_id = _thread(db, owner)
    only = _upload(db, owner, b"only here", "a.txt", session_id=thread_id)
    _upload(db, owner, b"shared", "b.txt", session_id=thread_id)
    _upload(db, owner, b"shared", "c.txt")
    keys = files.remove_thread_files(db, thread_id)
    db.commit()
    assert keys == [files.blob_key(owner.app_id, only.sha256)]
    assert files.purge_objects(keys) == 1
    assert len(_blobs(owner.app_id)) == 1
    assert files.list_thread_files(db, owner.account_id, thread_id) == []


def test_deleting_an_agent_purges_its_file_objects(db: Session, owner: Owner) -> None:
    _upload(db, owner, b"mine", "a.txt", session_id=_thread(db, owner))
    other_agent = agents.create_agent(
        db, owner.account_id, owner.app_id, name="Other", kind="cattle"
    )
    files.upload_file(
        db, owner.account_id, owner.app_id, other_agent.id, io.BytesIO(b"theirs"), "b.txt"
    )
    db.commit()
    assert len(_blobs(owner.app_id)) == 2
    delete_agent_everywhere(owner.account_id, owner.app_id, owner.agent_id)
    db.expire_all()
    assert [row.agent_id for row in db.exec(select(StoredFile)).all()] == [other_agent.id]
    assert len(_blobs(owner.app_id)) == 1


@pytest.fixture(autouse=True)
def _no_leftover_spool_files() -> Iterator[None]:
    yield
    assert list(spool_dir().iterdir()) == []
