"""The state of one thread's page (`/apps/[app_id]/threads/[thread_id]`): its header, the
live history (the shared `ThreadChat` watcher), follow-up messages with attachments, Stop,
rename, archive / unarchive, delete, and the thread's files."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import reflex as rx

from mosoo_core import files, sessions
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError, NotFound
from mosoo_core.runtime.threads import delete_thread_everywhere
from mosoo_core.sessions import actions
from mosoo_core.usage.reports import thread_usage
from mosoo_web.formatting import relative_time, size_text, usage_text
from mosoo_web.pages.threads.labels import PURPOSE_LABELS
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import SessionState, current_app_ids
from mosoo_web.state.thread_chat import ThreadChat


@dataclass
class ThreadFileRow:
    id: str = ""
    name: str = ""
    kind: str = ""
    size_text: str = ""
    time_text: str = ""


@dataclass(frozen=True)
class _Header:
    title: str
    display_title: str
    agent_id: str
    agent_name: str
    version_text: str
    archived: bool
    purpose: str
    end_user_id: str
    usage: str  # its tokens and cost as far as its records are kept, "" before any call


def _header(row: sessions.ThreadRow, spent: str = "") -> _Header:
    version = f"v{row.agent_version}" if row.agent_version is not None else "Draft"
    return _Header(
        title=row.title,
        display_title=row.display_title,
        agent_id=row.agent_id,
        agent_name=row.agent_name,
        version_text=version,
        archived=row.archived,
        purpose=PURPOSE_LABELS.get(row.purpose, row.purpose),
        end_user_id=row.end_user_id or "",
        usage=spent,
    )


def _load_header(account_id: str, app_id: str, thread_id: str) -> _Header:
    with session_scope() as db:
        row = sessions.get_thread(db, account_id, thread_id, app_id=app_id)
        return _header(row, usage_text(thread_usage(db, row.id)))


def _thread_files(account_id: str, thread_id: str) -> list[ThreadFileRow]:
    with session_scope() as db:
        views = files.list_thread_files(db, account_id, thread_id)
    now = utcnow()
    return [
        ThreadFileRow(
            id=v.id,
            name=v.path or v.name,
            kind=v.kind,
            size_text=size_text(v.size),
            time_text=relative_time(v.created_at, now),
        )
        for v in views
    ]


def _change(account_id: str, thread_id: str, action: str, title: str = "") -> _Header:
    with session_scope() as db:
        if action == "rename":
            row = sessions.rename_thread(db, account_id, thread_id, title)
        elif action == "archive":
            row = sessions.archive_thread(db, account_id, thread_id)
        else:
            row = sessions.unarchive_thread(db, account_id, thread_id)
    return _header(row)


class ThreadDetailState(ThreadChat, rx.State):
    """One thread: header, live transcript, composer, files."""

    title: rx.Field[str] = rx.field("")
    display_title: rx.Field[str] = rx.field("")
    agent_id: rx.Field[str] = rx.field("")
    agent_name: rx.Field[str] = rx.field("")
    version_text: rx.Field[str] = rx.field("")
    archived: rx.Field[bool] = rx.field(False)
    purpose: rx.Field[str] = rx.field("")
    end_user_id: rx.Field[str] = rx.field("")
    usage: rx.Field[str] = rx.field("")
    renaming: rx.Field[bool] = rx.field(False)
    title_error: rx.Field[str] = rx.field("")
    thread_files: rx.Field[list[ThreadFileRow]] = rx.field(default_factory=list)
    delete_open: rx.Field[bool] = rx.field(False)
    deleting: rx.Field[bool] = rx.field(False)
    changing: rx.Field[bool] = rx.field(False)

    @rx.var
    def can_send(self) -> bool:
        return (
            bool(self.thread_id)
            and (not self.run_active or self.can_queue)  # queued while the run prepares
            and not self.sending
            and not self.thread_missing
        )

    def _apply(self, header: _Header) -> None:
        self.title, self.display_title = header.title, header.display_title
        self.agent_id, self.agent_name = header.agent_id, header.agent_name
        self._chat_agent_id = header.agent_id
        self.version_text, self.archived = header.version_text, header.archived
        self.purpose, self.end_user_id = header.purpose, header.end_user_id
        self.usage = header.usage or self.usage  # a rename or archive does not re-read it

    async def _ids(self) -> tuple[str, str]:
        return await current_app_ids(self)

    @event
    async def load(self) -> Any:
        """After the App guard: the thread named in the URL, then its live history."""
        self._reset_chat()
        self.thread_id = ""
        self.renaming, self.title_error, self.delete_open, self.deleting = False, "", False, False
        self.thread_files = []
        thread_id = str(self.router.page.params.get("thread_id", "") or "")
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            return None  # not found, or the guard has just sent the tab to /login
        account_id, app_id = await self._ids()
        try:
            header = await asyncio.to_thread(_load_header, account_id, app_id, thread_id)
        except NotFound:
            self.thread_missing = True
            return None
        self._apply(header)
        self.thread_id = thread_id
        return ThreadDetailState.watch

    @event
    async def load_files(self) -> None:
        """Re-read the thread's files (the page re-mounts a marker when they may have changed)."""
        if not self.thread_id:
            return
        account_id, _app_id = await self._ids()
        try:
            self.thread_files = await asyncio.to_thread(_thread_files, account_id, self.thread_id)
        except NotFound:
            self.thread_files = []

    @event
    def start_rename(self) -> None:
        self.renaming, self.title_error = True, ""

    @event
    def cancel_rename(self) -> None:
        self.renaming, self.title_error = False, ""

    @event
    async def rename(self, form: dict[str, Any]) -> Any:
        account_id, _app_id = await self._ids()
        self.title_error = ""
        try:
            header = await asyncio.to_thread(
                _change, account_id, self.thread_id, "rename", str(form.get("title", ""))
            )
        except MosooError as error:  # the title's problem, or an archived thread: next to the field
            self.title_error = error.message
            return None
        self._apply(header)
        self.renaming = False
        return None

    async def _set_archived(self, action: str) -> Any:
        account_id, _app_id = await self._ids()
        self.changing = True
        try:
            header = await asyncio.to_thread(_change, account_id, self.thread_id, action)
        except MosooError as error:
            return rx.toast.error(error.message)
        finally:
            self.changing = False
        # No toast: the badge shows the change, and top-right toasts would cover these buttons.
        self._apply(header)
        return None

    @event
    async def archive(self) -> Any:
        return await self._set_archived("archive")

    @event
    async def unarchive(self) -> Any:
        return await self._set_archived("unarchive")

    @event
    def open_delete(self, is_open: bool = True) -> None:
        if not self.deleting:
            self.delete_open = is_open

    @event(background=True)
    async def confirm_delete(self) -> Any:
        # Background: stopping a run and removing a sandbox can take a while.
        async with self:
            account_id, app_id = await self._ids()
            if self.deleting or not self.thread_id:
                return None
            self.deleting = True
            thread_id, name = self.thread_id, self.display_title
        try:
            await asyncio.to_thread(delete_thread_everywhere, account_id, thread_id)
        except NotFound as error:
            async with self:
                self.deleting, self.delete_open = False, False
            return rx.toast.error(error.message)
        async with self:
            self._reset_chat()
            self.thread_id = ""
            self.deleting, self.delete_open = False, False
        return [rx.redirect(f"/apps/{app_id}/threads"), rx.toast.success(f"Deleted “{name}”.")]

    @event(background=True)
    async def send(self, form: dict[str, Any]) -> Any:
        """A follow-up message (with its attachments). An archived thread is unarchived."""
        text = str(form.get("message", ""))
        async with self:
            account_id, app_id = await self._ids()
            if not self.can_send:
                return None
            self.sending = True
            self.composer_error = ""
            thread_id = self.thread_id
            file_ids = self._take_attachment_ids()
        try:
            await asyncio.to_thread(
                actions.send_and_dispatch, account_id, thread_id, text, file_ids=file_ids
            )
        except MosooError as error:
            async with self:
                self.sending = False
                self.composer_error = error.message
            return None
        header = await asyncio.to_thread(_load_header, account_id, app_id, thread_id)
        async with self:
            self.sending = False
            self.composer_version += 1
            self.attachments, self.attach_error = [], ""
            self._apply(header)
            self.run_active = True  # until the watcher has the events
        return None
