"""The live chat of one thread, shared by Preview and the Threads page.

One background watcher per open page follows the current thread through
`mosoo_core.event_feed.ThreadFeed.follow` (each event once, in order: the database first,
then the Redis stream, the database again for whatever the stream missed). Events are
folded into a local `Transcript` and pushed to the state at most every 100 ms: the settled
items in `items` (re-sent only when an item settles or a tool card / permission changes)
and the text still streaming in `LiveText` (small, changes per batch). `LiveText` is a
state of its own: the browser re-renders whatever reads a state when any of its vars
changes, and the transcript (markdown, as long as the thread) must not be re-rendered ten
times a second: a 36 KB thread fell ten seconds behind a fast answer that way. Pages keep
the thread id in the URL so a reload re-opens it and replays everything so far.

A page state mixes in `ThreadChat`; a watcher stops when the tab leaves the page it started
on, closes, or starts following another thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import reflex as rx
from reflex.event import EventSpec

from mosoo_core import files
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError, NotFound
from mosoo_core.event_feed import ThreadFeed
from mosoo_core.logs import get_logger
from mosoo_core.sessions import actions
from mosoo_core.sessions.transcript import Transcript
from mosoo_web.formatting import size_text
from mosoo_web.reflex_typing import event
from mosoo_web.state.chat_items import ChatItem, chat_item, usage_text
from mosoo_web.state.session import SessionState, SignedOut, current_account_id, tab_signed_out

log = get_logger(__name__)

FLUSH_SECONDS = 0.1  # push deltas to the browser at most this often
QUIET_RECHECK_SECONDS = 2.0  # with a quiet stream, look at the database this often
DISCONNECTED_GRACE_SECONDS = 30.0  # a closed tab stops its watcher after this long
MAX_PENDING_ATTACHMENTS = files.MAX_ATTACHMENTS_PER_MESSAGE
# Events after which a thread's file list may have changed (pages re-read it then).
FILE_EVENT_TYPES = frozenset(
    {
        "file.changed",
        "session_files.updated",
        "user.message",
        "run.completed",
        "run.failed",
        "run.cancelled",
    }
)


@dataclass
class AttachmentChip:
    """An uploaded file waiting to go out with the next message."""

    id: str = ""
    name: str = ""
    size_text: str = ""


def _store_upload(
    account_id: str, app_id: str, agent_id: str, upload: rx.UploadFile
) -> AttachmentChip:
    """Uploaded for the Agent, bound to the thread by the message that names it: a chip left
    behind (New chat, leaving the page) stays unbound and the hourly sweep removes it."""
    with session_scope() as db:
        view = files.upload_file(
            db,
            account_id,
            app_id,
            agent_id,
            upload.file,
            upload.filename or "file",
            upload.content_type,
        )
    return AttachmentChip(id=view.id, name=view.name, size_text=size_text(view.size))


def _discard_upload(account_id: str, file_id: str) -> None:
    with session_scope() as db:
        files.delete_file(db, account_id, file_id)


def _base_names(names: Any) -> list[str]:
    """File names from the upload widget (it reports paths like "./notes.txt")."""
    found = []
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and name.strip():
            found.append(name.replace("\\", "/").rsplit("/", 1)[-1])
    return found


class LiveText(rx.State):
    """The text of the shown thread's answer or thinking still streaming (see the module
    docstring); its kind is the page's `live_kind`, "" while nothing streams."""

    text: rx.Field[str] = rx.field("")


@dataclass
class _Pushed:
    """What the browser has, so a push sends only what changed."""

    version: int = -1
    status_version: int = -1
    live_kind: str = ""
    live_text: str | None = None  # None: not pushed yet (LiveText may hold another thread's)
    files_marker: int = 0  # counts events after which the thread's files may differ
    files_pushed: int = -1

    def note_files(self, events: list[dict[str, Any]]) -> None:
        if any(event.get("type") in FILE_EVENT_TYPES for event in events):
            self.files_marker += 1

    def behind(self, transcript: Transcript) -> bool:
        open_item = transcript.open_item
        return (
            self.files_marker != self.files_pushed
            or self.version != transcript.version
            or self.status_version != transcript.status_version
            or self.live_kind != (open_item.kind if open_item else "")
            or self.live_text != (open_item.text if open_item else "")
        )


async def client_connected(token: str) -> bool:
    """Whether the tab still has a socket (best effort: unknown counts as connected)."""
    try:
        from reflex_base.registry import RegistrationContext

        namespace = RegistrationContext.get().app.event_namespace
        if namespace is None or not token:
            return True
        return bool(await namespace._token_manager.is_token_connected(token))
    except Exception as error:
        log.warning("chat.connection_check_failed", error=type(error).__name__)
        return True


def thread_url_script(thread_id: str) -> EventSpec:
    change = (
        f"u.searchParams.set('thread', {json.dumps(thread_id)});"
        if thread_id
        else "u.searchParams.delete('thread');"
    )
    return rx.call_script(
        f"(() => {{ const u = new URL(window.location.href); {change} "
        "window.history.replaceState(window.history.state, '', u.toString()); })()"
    )


class ThreadChat(rx.State, mixin=True):
    """Chat vars and the handlers every thread view shares (Stop, permissions, the watcher)."""

    thread_id: rx.Field[str] = rx.field("")
    thread_missing: rx.Field[bool] = rx.field(False)
    items: rx.Field[list[ChatItem]] = rx.field(default_factory=list)
    live_kind: rx.Field[str] = rx.field("")  # what streams: "assistant", "thinking" or ""
    session_status: rx.Field[str] = rx.field("idle")
    run_active: rx.Field[bool] = rx.field(False)
    needs_approval: rx.Field[bool] = rx.field(False)
    last_run_status: rx.Field[str] = rx.field("")
    # The active run waits for its environment's packages: queued or building ("" if not).
    preparing: rx.Field[str] = rx.field("")
    # Messages waiting their turn behind the active run, and whether another may join them
    # (while the run is still preparing or waking: the waits the chat names).
    queued: rx.Field[list[ChatItem]] = rx.field(default_factory=list)
    can_queue: rx.Field[bool] = rx.field(False)
    usage_total: rx.Field[str] = rx.field("")
    answered_requests: rx.Field[list[str]] = rx.field(default_factory=list)
    sending: rx.Field[bool] = rx.field(False)
    composer_error: rx.Field[str] = rx.field("")
    # Bumped after a message is stored: the composer re-mounts empty.
    composer_version: rx.Field[int] = rx.field(0)
    # Uploaded, sent with the next message.
    attachments: rx.Field[list[AttachmentChip]] = rx.field(default_factory=list)
    attach_error: rx.Field[str] = rx.field("")
    # Bumped when the thread's files may have changed; pages re-read their file list then.
    files_version: rx.Field[int] = rx.field(0)
    # Each open/reload/thread change starts a new watcher; older ones see the bump and end.
    _watch_generation: int = 0
    _chat_agent_id: str = ""  # the Agent attachments are uploaded for (set by the page)

    def _chat_page_key(self) -> str:
        """The page this tab shows; a watcher stops when it changes (the query string, which
        names the thread, is the generation's business)."""
        return self.router.url.path or ""

    def _reset_chat(self) -> None:
        """Forget the shown thread's transcript (the watcher of it, too)."""
        self._watch_generation += 1
        self.items = []
        self.live_kind = ""  # hides LiveText, the old thread's until the first push
        self.session_status = "idle"
        self.run_active = False
        self.needs_approval = False
        self.last_run_status = ""
        self.preparing = ""
        self.queued = []
        self.can_queue = False
        self.usage_total = ""
        self.answered_requests = []
        self.composer_error = ""
        self.thread_missing = False
        self.attachments = []
        self.attach_error = ""

    def _take_attachment_ids(self) -> list[str]:
        return [chip.id for chip in self.attachments]

    @event
    async def attach_files(self, uploads: list[rx.UploadFile]) -> None:
        """Store the chosen files; each becomes a removable chip until the message goes out."""
        account_id = await current_account_id(self)
        if not uploads:
            return  # every file was refused by the widget: `reject_files` says why
        self.attach_error = ""
        app_id = (await self.get_state(SessionState)).current_app_id
        agent_id = self._chat_agent_id
        if not account_id or not agent_id:
            return
        refused: list[str] = []
        for upload in uploads:
            name = upload.filename or "file"
            if len(self.attachments) >= MAX_PENDING_ATTACHMENTS:
                refused.append(
                    f"{name} was not attached: a message takes at most {MAX_PENDING_ATTACHMENTS} files."
                )
                continue
            try:
                chip = await asyncio.to_thread(_store_upload, account_id, app_id, agent_id, upload)
            except MosooError as error:
                refused.append(f"{name} was not attached: {error.message}")
                continue
            self.attachments = [*self.attachments, chip]
        self.attach_error = " ".join(refused)

    @event
    def reject_files(self, names: list[str]) -> None:
        """Files the widget refused before uploading (over 64 MiB, or too many at once)."""
        shown = _base_names(names) or ["A file"]
        log.info("chat.attachments_refused", count=len(shown))
        self.attach_error = (
            f"{', '.join(shown)} {'was' if len(shown) == 1 else 'were'} not attached: "
            f"files are at most 64 MiB each, {MAX_PENDING_ATTACHMENTS} at a time."
        )

    @event
    async def remove_attachment(self, file_id: str) -> Any:
        account_id = await current_account_id(self)
        if not any(chip.id == file_id for chip in self.attachments):
            return None
        self.attachments = [chip for chip in self.attachments if chip.id != file_id]
        self.attach_error = ""
        # Already gone (or bound elsewhere): the chip is what the owner removed.
        with contextlib.suppress(MosooError):
            await asyncio.to_thread(_discard_upload, account_id, file_id)
        return None

    @event(background=True)
    async def stop(self) -> Any:
        async with self:
            account_id = await current_account_id(self)
            thread_id = self.thread_id
        if not thread_id:
            return None
        try:
            await asyncio.to_thread(actions.stop_run, account_id, thread_id)
        except MosooError as error:
            return rx.toast.error(error.message)
        return None

    @event(background=True)
    async def allow_once(self, request_id: str) -> Any:
        return await _answer_permission(self, request_id, "allow_once")

    @event(background=True)
    async def reject(self, request_id: str) -> Any:
        return await _answer_permission(self, request_id, "reject_once")

    @event(background=True)
    async def watch(self) -> None:
        """Follow the open thread until the page moves on (see the module docstring)."""
        async with self:
            generation = self._watch_generation
            thread_id = self.thread_id
            page_key = self._chat_page_key()
            account_id = await current_account_id(self)
            token = self.router.session.client_token
        if not thread_id or not account_id:
            return
        transcript = Transcript()
        pushed = _Pushed()
        log.info("chat.watch_started", thread_id=thread_id, generation=generation)
        reason = "error"
        try:
            async with ThreadFeed(
                account_id,
                thread_id,
                wait_seconds=QUIET_RECHECK_SECONDS,
                recheck_seconds=QUIET_RECHECK_SECONDS,
            ) as feed:
                reason = await _follow(self, feed, transcript, pushed, generation, token, page_key)
        except NotFound:
            reason = "thread_gone"
        except SignedOut:
            reason = "signed_out"
            raise  # the app's exception handler sends the tab to /login
        except (
            asyncio.CancelledError
        ):  # Reflex ends a page-load chain when its tab reloads or leaves
            reason = "cancelled"
            raise
        finally:
            log.info(
                "chat.watch_stopped", thread_id=thread_id, generation=generation, reason=reason
            )


async def _answer_permission(state: ThreadChat, request_id: str, decision: str) -> Any:
    async with state:
        account_id = await current_account_id(state)
        if request_id in state.answered_requests:
            return None
        state.answered_requests = [*state.answered_requests, request_id]
        thread_id = state.thread_id
    try:
        await asyncio.to_thread(
            actions.answer_permission, account_id, thread_id, request_id, decision
        )
    except MosooError as error:
        async with state:
            state.answered_requests = [r for r in state.answered_requests if r != request_id]
        return rx.toast.error(error.message)
    return None


async def _push(
    state: ThreadChat, generation: int, transcript: Transcript, pushed: _Pushed
) -> bool:
    """Hand the browser what changed; False when this watcher is no longer the current one."""
    open_item = transcript.open_item
    live_kind = open_item.kind if open_item else ""
    live_text = open_item.text if open_item else ""
    rows = (
        [chat_item(item) for item in transcript.settled_items]
        if pushed.version != transcript.version
        else None
    )
    status_behind = rows is not None or pushed.status_version != transcript.status_version
    async with state:
        if state._watch_generation != generation:
            return False
        if live_text != pushed.live_text:
            (await state.get_state(LiveText)).text = live_text
        if live_kind != pushed.live_kind:
            state.live_kind = live_kind
        if rows is not None:
            state.items = rows
        if status_behind:
            state.session_status = transcript.session_status
            state.run_active = (
                transcript.active_run_id is not None
                or transcript.session_status
                in (
                    "running",
                    "rescheduling",
                )
            )
            pending = {item.request_id for item in transcript.pending_permissions}
            state.needs_approval = bool(pending)
            if any(r not in pending for r in state.answered_requests):
                state.answered_requests = [r for r in state.answered_requests if r in pending]
            state.last_run_status = transcript.last_run_status
            state.preparing = transcript.preparing
            state.queued = [chat_item(item) for item in transcript.queued]
            state.can_queue = transcript.run_starting and transcript.preparing != ""
            state.usage_total = usage_text(transcript.usage)
        if pushed.files_marker != pushed.files_pushed:
            state.files_version += 1
    pushed.files_pushed = pushed.files_marker
    pushed.version, pushed.status_version = transcript.version, transcript.status_version
    pushed.live_kind, pushed.live_text = live_kind, live_text
    return True


async def _left_reason(state: ThreadChat, generation: int, page_key: str) -> str:
    """Why this watcher should stop ("" while it is still wanted). Raises `SignedOut` when
    the tab's session has ended unnoticed: the watcher ends and the tab goes to /login."""
    async with state:
        if state._watch_generation != generation:
            return "superseded"
        # Navigating to another console page leaves the state behind: stop with it.
        if state._chat_page_key() != page_key:
            return "left_page"
        # A signed-out tab follows nothing, whatever it still shows.
        return "signed_out" if await tab_signed_out(state) else ""


async def _follow(
    state: ThreadChat,
    feed: ThreadFeed,
    transcript: Transcript,
    pushed: _Pushed,
    generation: int,
    token: str,
    page_key: str,
) -> str:
    """Stream until the page no longer wants this thread; returns why it stopped."""
    batches = feed.follow(transcript.last_seq)
    try:
        transcript.apply_all(await anext(batches))  # what the database holds
    except NotFound:
        async with state:
            if state._watch_generation == generation:
                state.thread_missing = True
        return "thread_gone"
    pushed.files_marker += 1  # the page reads the file list once it has the thread
    if not await _push(state, generation, transcript, pushed):
        return "superseded"
    clock = time.monotonic
    last_push = last_check = clock()
    disconnected_since: float | None = None
    async for events in batches:
        pushed.note_files(events)
        transcript.apply_all(events)
        now = clock()
        if now - last_check >= QUIET_RECHECK_SECONDS:
            last_check = now
            reason = await _left_reason(state, generation, page_key)
            if reason:
                return reason
            if await client_connected(token):
                disconnected_since = None
            elif disconnected_since is None:
                disconnected_since = now
            elif now - disconnected_since >= DISCONNECTED_GRACE_SECONDS:
                return "client_gone"
        behind = pushed.behind(transcript)
        if behind and now - last_push >= FLUSH_SECONDS:
            if not await _push(state, generation, transcript, pushed):
                return "superseded"
            last_push, behind = now, False
        # Wake up when the next flush is due, else when the next check is.
        feed.wait_seconds = (last_push + FLUSH_SECONDS - now) if behind else QUIET_RECHECK_SECONDS
    return "feed_ended"  # not expected: the feed follows until told to stop
