"""`/dev/mailbox`: codes sent while no SMTP server is configured. Registered only in
development mode, and answered only to loopback clients."""

from __future__ import annotations

import ipaddress

import reflex as rx
from reflex.vars import ObjectVar

from mosoo_core import mail
from mosoo_core.db import session_scope
from mosoo_core.settings import get_settings
from mosoo_web.client_ip import tab_client_ip
from mosoo_web.components.layout import brand
from mosoo_web.reflex_typing import event


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class DevMailboxState(rx.State):
    allowed: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    messages: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)

    @event
    def load(self) -> None:
        self.loaded = True
        self.allowed = get_settings().is_development and is_loopback(tab_client_ip(self.router))
        if not self.allowed:
            self.messages = []
            return
        with session_scope() as db:
            rows = mail.list_dev_mailbox(db)
        self.messages = [
            {
                "to": row.to_address,
                "subject": row.subject,
                "body": row.body,
                "at": row.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            }
            for row in rows
        ]


def _message(message: ObjectVar[dict[str, str]]) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.text(message["to"], weight="medium", data_testid="mail-to"),
                rx.spacer(),
                rx.text(message["at"], size="1", color_scheme="gray"),
                width="100%",
            ),
            rx.text(message["subject"], size="2", data_testid="mail-subject"),
            rx.code_block(message["body"], language="log", width="100%"),
            width="100%",
        ),
        width="100%",
        data_testid="mail-message",
    )


def dev_mailbox_page() -> rx.Component:
    return rx.box(
        rx.vstack(
            brand(),
            rx.heading("Development mailbox", size="6"),
            rx.text(
                "Emails Mosoo would have sent. Only shown in development mode on this machine.",
                color_scheme="gray",
                size="2",
            ),
            rx.button(
                "Refresh", on_click=DevMailboxState.load, variant="soft", data_testid="mail-refresh"
            ),
            rx.cond(
                DevMailboxState.allowed,
                rx.cond(
                    DevMailboxState.messages.length() > 0,
                    rx.vstack(rx.foreach(DevMailboxState.messages, _message), width="100%"),
                    rx.text("No messages yet.", color_scheme="gray"),
                ),
                rx.cond(
                    DevMailboxState.loaded,
                    rx.text("Not available.", data_testid="mail-unavailable"),
                    rx.spinner(),
                ),
            ),
            spacing="4",
            max_width="760px",
            margin_x="auto",
            width="100%",
        ),
        padding="32px 16px",
    )
