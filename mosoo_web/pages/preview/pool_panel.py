"""The Warm pool panel on a Task Agent's Preview, where an Assistant has its Sandbox panel: the
sandboxes started ahead of its runs (`agent_pool.agent_pool`: the keys its next run would use
on this host), each key's members standing by against the target, starting, hits, misses and
hit rate. "Off" when the size for its kind of sandbox is 0; before its first run, that the
pool starts after it. Read in the background when it mounts, and on Refresh."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import reflex as rx
from reflex.vars import ObjectVar
from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.errors import MosooError
from mosoo_core.runtime import agent_pool
from mosoo_web.formatting import relative_time
from mosoo_web.pages.preview.panel_card import error_text, panel_card, status_badge
from mosoo_web.pages.preview.state import PreviewState
from mosoo_web.reflex_typing import event, match_component
from mosoo_web.state.session import current_app_ids


@dataclass
class PoolKeyRow:
    """One key of the Agent's pool, as the panel writes it."""

    standing_by: str = ""  # "1 of 2"
    starting: str = ""
    hits: str = ""
    misses: str = ""
    hit_rate: str = ""
    last_run: str = ""


@dataclass(frozen=True)
class PoolShown:
    status: str  # off | empty (no run yet) | on
    kind: str  # what its sandboxes are made with: "openai, network none"
    rows: list[PoolKeyRow]


def pool_shown(pool: agent_pool.AgentPool) -> PoolShown:
    now = utcnow()
    rows = [
        PoolKeyRow(
            standing_by=f"{key.standing_by} of {key.target}",
            starting=str(key.starting),
            hits=str(key.hits),
            misses=str(key.misses),
            hit_rate="" if key.hit_rate is None else f"{key.hit_rate:.0%}",
            last_run=relative_time(key.last_wanted_at, now),
        )
        for key in pool.keys
    ]
    status = "off" if not pool.enabled else "on" if rows else "empty"
    return PoolShown(status, f"{pool.runtime}, network {pool.network_policy}", rows)


def read_pool(account_id: str, agent_id: str) -> PoolShown | None:
    """None for an Assistant (the kind changed meanwhile: its Sandbox panel shows instead)."""
    with session_scope() as db:
        pool = agent_pool.agent_pool(db, account_id, agent_id)
    return pool_shown(pool) if pool is not None else None


class PoolPanelState(rx.State):
    pool_status: rx.Field[str] = rx.field("")  # "" until the first read is in
    pool_kind: rx.Field[str] = rx.field("")
    rows: rx.Field[list[PoolKeyRow]] = rx.field(default_factory=list)
    error: rx.Field[str] = rx.field("")
    loading: rx.Field[bool] = rx.field(False)
    # Each refresh takes a number; only the newest one's read is shown.
    _read: int = 0

    @event(background=True)
    async def refresh(self) -> Any:
        async with self:
            account_id, _app_id = await current_app_ids(self)
            agent_id = (await self.get_state(PreviewState)).current_agent_id
            if not agent_id:
                return None
            self._read += 1
            read = self._read
            self.loading = True
        shown: PoolShown | None = None
        error = ""
        try:
            shown = await asyncio.to_thread(read_pool, account_id, agent_id)
        except MosooError as failure:
            error = failure.message
        async with self:
            if read != self._read:
                return None
            self.loading, self.error = False, error
            if shown is not None:
                self.pool_status, self.pool_kind, self.rows = shown.status, shown.kind, shown.rows
        return None


State = PoolPanelState
STATUS_BADGES: dict[str, tuple[str, LiteralAccentColor]] = {
    "on": ("On", "green"),
    "empty": ("On", "green"),
    "off": ("Off", "gray"),
}


def _figure(label: str, value: rx.Var[str], test_id: str) -> rx.Component:
    return rx.vstack(
        rx.text(label, size="1", color_scheme="gray"),
        rx.text(value, size="2", font_family="monospace", data_testid=test_id),
        spacing="0",
    )


def _key_row(row: ObjectVar[PoolKeyRow]) -> rx.Component:
    return rx.vstack(
        rx.hstack(
            _figure("Standing by", row.standing_by, "pool-standing-by"),
            _figure("Starting", row.starting, "pool-starting"),
            _figure("Hits", row.hits, "pool-hits"),
            _figure("Misses", row.misses, "pool-misses"),
            _figure("Hit rate", row.hit_rate, "pool-hit-rate"),
            spacing="4",
            wrap="wrap",
        ),
        rx.text("Last run ", row.last_run, size="1", color_scheme="gray"),
        spacing="1",
        width="100%",
        data_testid="pool-key",
    )


def _note(test_id: str, *text: str | rx.Var[str]) -> rx.Component:
    return rx.text(*text, size="1", color_scheme="gray", data_testid=test_id)


def pool_panel() -> rx.Component:
    """Shown for a Task only (an Assistant has the Sandbox panel); read when it mounts."""
    return rx.cond(
        PreviewState.kind == "cattle",
        panel_card(
            "Warm pool",
            status_badge(State.pool_status, STATUS_BADGES, "pool-status"),
            match_component(
                State.pool_status,
                (
                    "off",
                    _note(
                        "pool-off",
                        "Off for this kind of sandbox (",
                        State.pool_kind,
                        "): every run starts its own. MOSOO_POOL_SIZE or MOSOO_POOL_SIZES "
                        "turn it on.",
                    ),
                ),
                (
                    "empty",
                    _note(
                        "pool-empty",
                        "The pool starts after this Agent's first run: sandboxes then "
                        "stand by for the next ones.",
                    ),
                ),
                ("on", rx.foreach(State.rows, _key_row)),
                rx.fragment(),
            ),
            error_text(State.error),
            refresh=State.refresh,
            loading=State.loading,
            refresh_label="Refresh the warm pool",
            test_id="pool-panel",
        ),
        rx.fragment(),
    )
