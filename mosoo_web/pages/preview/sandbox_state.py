"""The Sandbox panel's state (an Assistant's one sandbox, on Preview): its status, sampled in
the background (about a second: CPU use is measured), and the owner's operations on it
(`mosoo_core.runtime.pet_operations`), each run in the background and answered by a toast."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import reflex as rx

from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.runtime import pet_operations
from mosoo_core.settings import get_settings
from mosoo_web.formatting import size_text
from mosoo_web.pages.preview.services import pet_status
from mosoo_web.pages.preview.state import PreviewState
from mosoo_web.reflex_typing import event
from mosoo_web.state.session import current_app_ids

log = get_logger(__name__)


@dataclass(frozen=True)
class SandboxFigures:
    """What the panel shows of one status sample, as text."""

    state: str  # running | stopped | hibernated | none
    uptime: str
    image: str
    image_full: str
    cpu: str
    memory: str


def uptime_text(seconds: int | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} days"


def short_image(image: str) -> str:
    """An image id or name short enough for the panel: "sha256:0123…" keeps 12 digits of
    its hash, a name drops its registry path and keeps 12 characters of a long tag."""
    if image.startswith("sha256:"):
        return image.removeprefix("sha256:")[:12]
    name = image.rsplit("/", 1)[-1]
    base, _, tag = name.partition(":")
    return f"{base}:{tag[:12]}" if len(tag) > 12 else name


def memory_text(used: int | None, limit: int | None) -> str:
    if used is None:
        return ""
    return f"{size_text(used)} of {size_text(limit)}" if limit else size_text(used)


def figures(status: pet_operations.SandboxStatus) -> SandboxFigures:
    return SandboxFigures(
        state=status.state,
        uptime=uptime_text(status.uptime_seconds),
        image=short_image(status.image),
        image_full=status.image,
        cpu="" if status.cpu_percent is None else f"{status.cpu_percent:.1f}%",
        memory=memory_text(status.memory_bytes, status.memory_limit_bytes),
    )


def sample_status(account_id: str, agent_id: str) -> pet_operations.SandboxStatus:
    with session_scope() as db:
        return pet_operations.sandbox_status(db, account_id, agent_id)


class SandboxPanelState(rx.State):
    sandbox_state: rx.Field[str] = rx.field("")  # "" until the first sample is in
    uptime: rx.Field[str] = rx.field("")
    image: rx.Field[str] = rx.field("")
    image_full: rx.Field[str] = rx.field("")
    cpu: rx.Field[str] = rx.field("")
    memory: rx.Field[str] = rx.field("")
    status_error: rx.Field[str] = rx.field("")
    loading: rx.Field[bool] = rx.field(False)
    busy: rx.Field[str] = rx.field("")  # the operation under way, "" when none
    reset_open: rx.Field[bool] = rx.field(False)
    confirm_text: rx.Field[str] = rx.field("")
    # The owner's terminal (MOSOO_TERMINAL_ENABLED), in a dialog while `terminal_open`.
    terminal_enabled: rx.Field[bool] = rx.field(False)
    terminal_open: rx.Field[bool] = rx.field(False)
    # Each refresh takes a number; only the newest one's sample is shown (a refresh on page
    # load may still be sampling when an operation's refresh starts).
    _sample: int = 0

    async def _owner(self) -> tuple[str, str, str]:
        """(account id, App id, Agent id); the sign-in session re-checked (raises
        `SignedOut`). Call inside `async with self`."""
        account_id, app_id = await current_app_ids(self)
        preview = await self.get_state(PreviewState)
        return account_id, app_id, preview.current_agent_id

    @event(background=True)
    async def refresh(self) -> Any:
        """Sample the sandbox (about a second) without holding up the page."""
        async with self:
            account_id, _app_id, agent_id = await self._owner()
            if not agent_id:
                return None
            self._sample += 1
            sample = self._sample
            self.loading = True
            self.terminal_enabled = get_settings().terminal_enabled
        shown: SandboxFigures | None = None
        error = ""
        try:
            shown = figures(await asyncio.to_thread(sample_status, account_id, agent_id))
        except MosooError as failure:
            error = failure.message
        except OSError as failure:  # the Docker daemon cannot be reached
            log.warning("preview.sandbox_status_failed", agent_id=agent_id, error=str(failure))
            error = "The sandbox backend could not be reached."
        async with self:
            if sample != self._sample:
                return None
            self.loading = False
            self.status_error = error
            if shown is not None:
                self._show(shown)
        return None

    def _show(self, shown: SandboxFigures) -> None:
        self.sandbox_state, self.uptime, self.cpu = shown.state, shown.uptime, shown.cpu
        self.image, self.image_full, self.memory = shown.image, shown.image_full, shown.memory

    @event(background=True)
    async def operate(self, operation: str) -> Any:
        """Restart, recreate, reset (confirmed by the Agent's name), hibernate or wake; the
        outcome or the refusal in a toast, then a fresh status."""
        async with self:
            account_id, app_id, agent_id = await self._owner()
            if self.busy or not agent_id or operation not in pet_operations.OPERATIONS:
                return None
            self.busy = operation
            confirm_name = self.confirm_text if operation == "reset" else ""
        done = False
        try:
            result = await asyncio.to_thread(
                pet_operations.run_operation,
                account_id,
                agent_id,
                operation,
                confirm_name=confirm_name,
            )
            done, toast = True, rx.toast.success(result.message)
        except MosooError as refusal:
            toast = rx.toast.error(refusal.message)
        finally:
            # After an unexpected error too (Reflex's handler reports it): the buttons come back.
            await self._after_operation(
                account_id, app_id, agent_id, close_reset=done and operation == "reset"
            )
        return [toast, SandboxPanelState.refresh]

    async def _after_operation(
        self, account_id: str, app_id: str, agent_id: str, close_reset: bool
    ) -> None:
        """Free the buttons, and keep the Apply callout in step with what the operation left
        (as Apply does: `pet_status` against the profile now)."""
        pending = await asyncio.to_thread(pet_status, account_id, app_id, agent_id)
        async with self:
            self.busy = ""
            if close_reset:
                self.reset_open, self.confirm_text = False, ""
            preview = await self.get_state(PreviewState)
            if preview.current_agent_id == agent_id:
                preview.has_pet_sandbox = pending is not None
                preview.pending_changes = pending or []

    @event
    def set_reset_open(self, value: bool) -> None:
        if not self.busy:
            self.reset_open = value
            self.confirm_text = ""

    @event
    def set_confirm_text(self, value: str) -> None:
        self.confirm_text = value

    @event
    def set_terminal_open(self, value: bool) -> None:
        """Open or close the terminal's dialog; closing it ends the shell (the socket goes)."""
        self.terminal_open = value and self.terminal_enabled
