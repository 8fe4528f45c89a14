"""What a running driver reported in hello, read back for the console (issue 13 item 4)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlmodel import Session

from driver.protocol import PROTOCOL_VERSION, Hello
from mosoo_core import sessions
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.identity import list_apps, sign_in_identity
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.agents import Agent


def _owner(db: Session, email: str) -> tuple[str, str, str]:
    account = sign_in_identity(db, provider="email", subject=email, email=email)
    app_id = list_apps(db, account.id)[0].id
    agent = Agent(app_id=app_id, name="A", model="m", kind="pet")
    db.add(agent)
    db.flush()
    return account.id, app_id, agent.id


def _hello(instance_id: str, boot_token: str, capabilities: list[str]) -> Hello:
    return Hello(
        driver_instance_id=instance_id,
        boot_token=boot_token,
        protocol_version=PROTOCOL_VERSION,
        driver_version="test",
        runtime="claude",
        capabilities=capabilities,
        pid=1,
    )


def _running_driver(
    db: Session, app_id: str, subject: str, thread_id: str, capabilities: list[str]
) -> str:
    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=subject, runtime="claude", session_id=thread_id
    )
    welcome = driver_plane.accept_hello(
        db, _hello(driver.instance_id, driver.boot_token, capabilities)
    )
    driver_plane.mark_ready(db, driver.instance_id, welcome.connection_id)
    return driver.instance_id


def test_a_pet_agents_and_its_threads_running_driver_report_what_hello_said(
    db: Session,
) -> None:
    account_id, app_id, agent_id = _owner(db, "caps@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    assert sessions.live_capabilities(db, account_id, agent_id=agent_id) is None
    assert sessions.live_capabilities(db, account_id, thread_id=thread.id) is None

    driver = driver_plane.register_driver(
        db, app_id=app_id, subject=f"agent:{agent_id}", runtime="claude", session_id=thread.id
    )
    welcome = driver_plane.accept_hello(
        db, _hello(driver.instance_id, driver.boot_token, ["text_stream", "mcp"])
    )
    # Said hello, still starting its backend: not ready, so the catalog stays in charge.
    assert sessions.live_capabilities(db, account_id, thread_id=thread.id) is None
    driver_plane.mark_ready(db, driver.instance_id, welcome.connection_id)
    assert sessions.live_capabilities(db, account_id, agent_id=agent_id) == ["text_stream", "mcp"]
    assert sessions.live_capabilities(db, account_id, thread_id=thread.id) == [
        "text_stream",
        "mcp",
    ]

    driver_plane.mark_stopped(db, driver.instance_id)
    assert sessions.live_capabilities(db, account_id, agent_id=agent_id) is None


def test_the_newest_running_driver_of_a_thread_is_the_one_read(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "newest@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    _running_driver(db, app_id, f"session:{thread.id}", thread.id, ["text_stream"])
    _running_driver(db, app_id, f"session:{thread.id}", thread.id, ["text_stream", "cancel"])
    assert sessions.live_capabilities(db, account_id, thread_id=thread.id) == [
        "text_stream",
        "cancel",
    ]


def test_another_owners_agent_or_thread_is_not_found(db: Session) -> None:
    account_id, app_id, agent_id = _owner(db, "mine@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    _running_driver(db, app_id, f"agent:{agent_id}", thread.id, ["text_stream"])
    other_id, _, _ = _owner(db, "other@example.com")
    with pytest.raises(NotFound):
        sessions.live_capabilities(db, other_id, agent_id=agent_id)
    with pytest.raises(NotFound):
        sessions.live_capabilities(db, other_id, thread_id=thread.id)
    with pytest.raises(InvalidInput):
        sessions.live_capabilities(db, account_id)


def test_a_hello_with_an_unknown_capability_does_not_validate() -> None:
    with pytest.raises(ValidationError, match="unknown capabilities"):
        _hello("01ABC", "token", ["text_stream", "telepathy"])
    with pytest.raises(ValidationError):
        _hello("01ABC", "token", ["text_stream"] * 33)  # the list keeps its length limit


def test_preview_chat_uses_the_running_drivers_report_else_none_for_the_catalog(
    db: Session,
) -> None:
    from mosoo_web.pages.preview import services as preview

    account_id, app_id, agent_id = _owner(db, "preview@example.com")
    thread = sessions.create_session(db, account_id, app_id, agent_id)
    db.commit()
    # Nothing runs: None, so the chat keeps to the catalog's capabilities.
    assert preview.chat_capabilities(account_id, agent_id, thread.id, "pet") is None
    assert preview.chat_capabilities(account_id, agent_id, "", "cattle") is None
    _running_driver(db, app_id, f"agent:{agent_id}", thread.id, ["text_stream", "cancel"])
    db.commit()
    assert preview.chat_capabilities(account_id, agent_id, thread.id, "pet") == [
        "cancel",
        "text_stream",
    ]
    # A Pet's running sandbox serves a chat that has no thread yet.
    assert preview.chat_capabilities(account_id, agent_id, "", "pet") == ["cancel", "text_stream"]
    other_id, _, _ = _owner(db, "someone@example.com")
    db.commit()
    assert preview.chat_capabilities(other_id, agent_id, thread.id, "pet") is None
