"""The Threads inbox services: sections, filters, rename, archive, automatic titles, ownership."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session

from mosoo_core import sessions
from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.sessions import AgentSession, SessionRun


def _owner(db: Session, email: str = "inbox@example.com") -> tuple[str, str, str]:
    account = sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="Helper", model="m")
    db.add(agent)
    db.flush()
    return account.id, app_id, agent.id


def _thread(
    db: Session, account_id: str, app_id: str, agent_id: str, *, age_minutes: int = 0
) -> str:
    thread_id = sessions.create_session(db, account_id, app_id, agent_id).id
    row = db.get(AgentSession, thread_id)
    assert row is not None
    row.updated_at = utcnow() - timedelta(minutes=age_minutes)
    db.add(row)
    db.flush()
    return thread_id


def _run(
    db: Session,
    account_id: str,
    thread_id: str,
    text: str,
    finish: str | None = "completed",
    **error: str,
) -> None:
    run_id = sessions.send_message(db, account_id, thread_id, text).run.id
    if finish is not None:
        run = db.get(SessionRun, run_id)
        assert run is not None
        driver_plane.finish_run(
            db, run, finish, code=error.get("code"), message=error.get("message"), retryable=False
        )
    db.flush()


def _ids(rows: list[sessions.ThreadRow]) -> list[str]:
    return [row.id for row in rows]


def test_threads_fall_into_working_completed_and_archived(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    done = _thread(db, account_id, app_id, agent_id, age_minutes=3)
    _run(db, account_id, done, "finished work")
    busy = _thread(db, account_id, app_id, agent_id, age_minutes=2)
    _run(db, account_id, busy, "still going", finish=None)
    shelved = _thread(db, account_id, app_id, agent_id, age_minutes=1)
    _run(db, account_id, shelved, "old news")
    sessions.archive_thread(db, account_id, shelved)
    rescheduling = _thread(db, account_id, app_id, agent_id)
    row = db.get(AgentSession, rescheduling)
    assert row is not None
    row.status = "rescheduling"
    db.add(row)
    db.flush()

    assert set(_ids(sessions.list_threads(db, account_id, app_id, section="working"))) == {
        busy,
        rescheduling,
    }
    assert _ids(sessions.list_threads(db, account_id, app_id, section="completed")) == [done]
    assert _ids(sessions.list_threads(db, account_id, app_id, section="archived")) == [shelved]
    everything = sessions.list_threads(db, account_id, app_id)
    assert {r.id: r.section for r in everything} == {
        done: "completed",
        busy: "working",
        shelved: "archived",
        rescheduling: "working",
    }
    assert sessions.count_threads(db, account_id, app_id) == {
        "working": 2,
        "completed": 1,
        "archived": 1,
    }


def test_rows_carry_agent_title_status_and_last_run_error(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    _run(
        db,
        account_id,
        thread_id,
        "Summarise the report",
        finish="failed",
        code="driver_lost",
        message="The driver went away.",
    )
    (row,) = sessions.list_threads(db, account_id, app_id)
    assert row.agent_name == "Helper"
    assert row.title == row.display_title == "Summarise the report"
    assert row.status == "idle"
    assert row.purpose == "preview"
    assert (row.last_run_status, row.last_run_error_code, row.last_run_error_message) == (
        "failed",
        "driver_lost",
        "The driver went away.",
    )
    assert row.updated_at is not None


def test_untitled_thread_shows_its_first_message_clipped(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    _run(db, account_id, thread_id, "word " * 40)
    row = db.get(AgentSession, thread_id)
    assert row is not None
    row.title = ""  # a thread from before automatic titles
    db.add(row)
    db.flush()
    (shown,) = sessions.list_threads(db, account_id, app_id)
    assert shown.title == ""
    assert shown.display_title.endswith("…") and len(shown.display_title) <= 80
    assert shown.display_title.startswith("word word")
    empty = _thread(db, account_id, app_id, agent_id)
    assert sessions.get_thread(db, account_id, empty).display_title == "New thread"


def test_filters_by_agent_and_by_failed_last_run(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    other = Agent(app_id=app_id, name="Other", model="m")
    db.add(other)
    db.flush()
    recovered = _thread(db, account_id, app_id, agent_id, age_minutes=3)
    _run(db, account_id, recovered, "first", finish="failed", code="x", message="boom")
    _run(db, account_id, recovered, "second")  # its last run completed
    broken = _thread(db, account_id, app_id, agent_id, age_minutes=2)
    _run(db, account_id, broken, "only", finish="failed", code="x", message="boom")
    elsewhere = _thread(db, account_id, app_id, other.id, age_minutes=1)
    _run(db, account_id, elsewhere, "hi", finish="failed", code="x", message="boom")

    assert _ids(sessions.list_threads(db, account_id, app_id, failed=True)) == [elsewhere, broken]
    assert _ids(sessions.list_threads(db, account_id, app_id, failed=True, agent_id=agent_id)) == [
        broken
    ]
    assert _ids(sessions.list_threads(db, account_id, app_id, failed=False)) == [recovered]
    assert _ids(sessions.list_threads(db, account_id, app_id, agent_id=other.id)) == [elsewhere]
    assert sessions.count_threads(db, account_id, app_id, failed=True, agent_id=agent_id) == {
        "working": 0,
        "completed": 1,
        "archived": 0,
    }
    assert _ids(sessions.list_threads(db, account_id, app_id, ids=[broken, recovered])) == [
        broken,
        recovered,
    ]


def test_pages_follow_each_other_without_gap_or_repeat(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    made = [_thread(db, account_id, app_id, agent_id, age_minutes=minutes) for minutes in range(5)]
    first = sessions.list_threads(db, account_id, app_id, limit=2)
    second = sessions.list_threads(db, account_id, app_id, limit=2, before=first[-1].id)
    third = sessions.list_threads(db, account_id, app_id, limit=2, before=second[-1].id)
    assert _ids(first) + _ids(second) + _ids(third) == made
    with pytest.raises(InvalidInput):
        sessions.list_threads(db, account_id, app_id, section="someday")
    with pytest.raises(InvalidInput):
        sessions.list_threads(db, account_id, app_id, limit=0)


def test_rename_collapses_whitespace_and_checks_the_length(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    assert (
        sessions.rename_thread(db, account_id, thread_id, "  Quarterly   report ").title
        == "Quarterly report"
    )
    for bad in ("", "   ", "x" * 81):
        with pytest.raises(InvalidInput) as refused:
            sessions.rename_thread(db, account_id, thread_id, bad)
        assert refused.value.field == "title"
    assert sessions.get_thread(db, account_id, thread_id).title == "Quarterly report"
    assert sessions.rename_thread(db, account_id, thread_id, "y" * 80).title == "y" * 80


def test_archive_is_refused_while_a_run_is_active_then_works(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    _run(db, account_id, thread_id, "long job", finish=None)
    with pytest.raises(Conflict, match="still working") as refused:
        sessions.archive_thread(db, account_id, thread_id)
    assert refused.value.code == "thread_active"
    assert sessions.get_thread(db, account_id, thread_id).archived is False
    run = sessions.active_run(db, thread_id)
    assert run is not None
    driver_plane.finish_run(db, run, "completed")
    archived = sessions.archive_thread(db, account_id, thread_id)
    assert archived.archived and archived.section == "archived"
    assert sessions.archive_thread(db, account_id, thread_id).archived  # twice is fine


def test_archived_thread_is_read_only_until_unarchived(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    sessions.archive_thread(db, account_id, thread_id)
    with pytest.raises(Conflict, match="Unarchive"):
        sessions.rename_thread(db, account_id, thread_id, "New name")
    row = sessions.unarchive_thread(db, account_id, thread_id)
    assert not row.archived and row.section == "completed"
    assert sessions.rename_thread(db, account_id, thread_id, "New name").title == "New name"


def test_a_new_message_unarchives_the_thread(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    sessions.archive_thread(db, account_id, thread_id)
    _run(db, account_id, thread_id, "back to it")
    assert sessions.get_thread(db, account_id, thread_id).section == "completed"


def test_first_message_titles_an_untitled_thread_once(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    _run(db, account_id, thread_id, "\n\n   Plan   the\tlaunch  \nwith details on the second line")
    assert sessions.get_thread(db, account_id, thread_id).title == "Plan the launch"
    _run(db, account_id, thread_id, "A later message")
    assert sessions.get_thread(db, account_id, thread_id).title == "Plan the launch"


def test_first_message_keeps_a_title_given_before_it(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db)
    thread_id = _thread(db, account_id, app_id, agent_id)
    sessions.rename_thread(db, account_id, thread_id, "Named first")
    _run(db, account_id, thread_id, "Hello")
    assert sessions.get_thread(db, account_id, thread_id).title == "Named first"


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("Short", "Short"),
        ("x" * 80, "x" * 80),
        ("x" * 81, "x" * 79 + "…"),  # one long word: cut where it must be
        ("alpha " * 20, ("alpha " * 13).strip() + "…"),  # cut at the last whole word
        ("  \n \t\n", ""),
    ],
)
def test_automatic_titles_are_one_line_of_at_most_80_characters(message: str, title: str) -> None:
    made = sessions.auto_title(message)
    assert made == title
    assert len(made) <= 80 and "\n" not in made


def test_another_owners_thread_is_not_found_everywhere(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "first@example.com")
    thread_id = _thread(db, account_id, app_id, agent_id)
    stranger, stranger_app, _agent = _owner(db, "second@example.com")
    for call in (
        lambda: sessions.get_thread(db, stranger, thread_id),
        lambda: sessions.rename_thread(db, stranger, thread_id, "Mine now"),
        lambda: sessions.archive_thread(db, stranger, thread_id),
        lambda: sessions.unarchive_thread(db, stranger, thread_id),
        lambda: sessions.delete_thread(db, stranger, thread_id),
        lambda: sessions.list_threads(db, stranger, app_id),
        lambda: sessions.count_threads(db, stranger, app_id),
    ):
        with pytest.raises(NotFound):
            call()
    assert sessions.list_threads(db, stranger, stranger_app, ids=[thread_id]) == []
    assert sessions.get_thread(db, account_id, thread_id).title == ""
