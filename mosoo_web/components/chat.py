"""The chat transcript: user bubbles, assistant markdown, thinking, tool cards, permission
prompts, usage lines and run errors. Pages hand in display rows (`ChatItem`) built from
`mosoo_core.sessions.transcript` items and the handlers for the permission buttons."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import reflex as rx
from reflex.event import EventCallback
from reflex.vars import ArrayVar, ObjectVar

from mosoo_web.components.downloads import download_link
from mosoo_web.components.icons import icon_tile
from mosoo_web.reflex_typing import cond_value, match_component
from mosoo_web.state.chat_items import ChatItem
from mosoo_web.state.thread_chat import LiveText

if TYPE_CHECKING:
    from mosoo_web.state.thread_chat import ThreadChat

MONO = "var(--code-font-family, ui-monospace, SFMono-Regular, Menlo, monospace)"

TOOL_ICONS = {
    "bash": "square-terminal",
    "read": "file-text",
    "write": "file-pen-line",
    "edit": "file-diff",
    "glob": "folder-search",
    "grep": "text-search",
    "web_fetch": "globe",
}


# --- rendering ------------------------------------------------------------------------------

# The handler a permission button sends with the request id (`ThreadChat.allow_once`, ...).
PermissionHandler = EventCallback[str]


def _attachment_names(item: ObjectVar[ChatItem]) -> rx.Component:
    return rx.flex(
        rx.foreach(
            item.attachments,
            lambda name: rx.badge(
                rx.icon("paperclip", size=11),
                name,
                variant="solid",
                color_scheme="gray",
                high_contrast=True,
                radius="full",
                data_testid="chat-user-attachment",
            ),
        ),
        wrap="wrap",
        gap="4px",
        margin_top="6px",
    )


def _user_bubble(item: ObjectVar[ChatItem]) -> rx.Component:
    return rx.hstack(
        rx.box(
            rx.text(item.text, size="2", white_space="pre-wrap", overflow_wrap="anywhere"),
            rx.cond(
                item.attachments.to(list[str]).length() > 0,
                _attachment_names(item),
                rx.fragment(),
            ),
            background=rx.color("accent", 9),
            color="white",
            padding_x="14px",
            padding_y="9px",
            border_radius="16px 16px 4px 16px",
            max_width="85%",
            data_testid="chat-user-message",
        ),
        justify="end",
        width="100%",
    )


def _queued_message(item: ObjectVar[ChatItem]) -> rx.Component:
    """A message waiting its turn: the agent answers it after the ones before it."""
    return rx.vstack(
        rx.box(_user_bubble(item), opacity="0.6", width="100%"),
        rx.text("Queued", size="1", color=rx.color("gray", 10)),
        align="end",
        spacing="1",
        width="100%",
        data_testid="chat-queued-message",
        key=item.key,
    )


def _markdown(text: rx.Var[str] | str) -> rx.Component:
    # Never raw HTML: the text is the model's (and through it whatever a tool read), so a
    # prompt-injected `<iframe srcdoc=...>` would otherwise run script in the owner's console.
    return rx.box(
        rx.markdown(text, use_raw=False),
        font_size="14px",
        line_height="1.6",
        overflow_wrap="anywhere",
        class_name="mosoo-markdown",
        width="100%",
    )


def _assistant_text(text: rx.Var[str] | str, streaming: bool = False) -> rx.Component:
    return rx.hstack(
        icon_tile("sparkles", 14, "6px", margin_top="2px"),
        rx.box(
            _markdown(text),
            rx.cond(streaming, rx.box(class_name="mosoo-caret"), rx.fragment()),
            flex="1",
            min_width="0",
            data_testid="chat-assistant-live" if streaming else "chat-assistant-message",
        ),
        align="start",
        spacing="3",
        width="100%",
    )


def _thinking(text: rx.Var[str] | str, streaming: bool = False) -> rx.Component:
    return rx.el.details(
        rx.el.summary(
            rx.hstack(
                rx.icon("brain", size=13),
                rx.text("Thinking…" if streaming else "Thought", size="1", weight="medium"),
                align="center",
                spacing="1",
                display="inline-flex",
            ),
            cursor="pointer",
            color=rx.color("gray", 10),
            list_style="none",
        ),
        rx.text(
            text,
            size="1",
            color=rx.color("gray", 10),
            white_space="pre-wrap",
            font_style="italic",
            padding_left="12px",
            margin_top="6px",
            border_left=f"2px solid {rx.color('gray', 5)}",
        ),
        open=streaming,
        margin_left="38px",
        data_testid="chat-thinking",
    )


def _status_chip(item: ObjectVar[ChatItem]) -> rx.Component:
    return match_component(
        item.status,
        (
            "running",
            rx.hstack(
                rx.spinner(size="1"),
                rx.text("Running", size="1"),
                align="center",
                spacing="1",
                color=rx.color("gray", 10),
            ),
        ),
        (
            "done",
            rx.hstack(
                rx.icon("check", size=13, color=rx.color("green", 10)),
                rx.text(item.duration_text, size="1", color=rx.color("gray", 10)),
                align="center",
                spacing="1",
            ),
        ),
        (
            "error",
            rx.hstack(
                rx.icon("circle-x", size=13, color=rx.color("red", 10)),
                rx.text("Error", size="1", color=rx.color("red", 11)),
                rx.text(item.duration_text, size="1", color=rx.color("gray", 10)),
                align="center",
                spacing="1",
            ),
        ),
        (
            "waiting",
            rx.hstack(
                rx.icon("shield-question", size=13, color=rx.color("amber", 10)),
                rx.text("Waiting for approval", size="1", color=rx.color("amber", 11)),
                align="center",
                spacing="1",
            ),
        ),
        ("interrupted", rx.text("Interrupted", size="1", color=rx.color("gray", 10))),
        rx.fragment(),
    )


def _code_block(
    label: str, text: rx.Var[str], test_id: str, error: rx.Var[bool] | bool = False
) -> rx.Component:
    return rx.vstack(
        rx.text(
            label,
            size="1",
            weight="medium",
            color=rx.color("gray", 10),
            text_transform="uppercase",
            letter_spacing="0.04em",
        ),
        rx.box(
            rx.el.pre(
                text,
                margin="0",
                white_space="pre-wrap",
                overflow_wrap="anywhere",
                font_family=MONO,
                font_size="12px",
                line_height="1.5",
            ),
            max_height="240px",
            overflow_y="auto",
            width="100%",
            padding="8px 10px",
            border_radius="6px",
            background=cond_value(error, rx.color("red", 2), rx.color("gray", 2)),
            border=f"1px solid {rx.color('gray', 4)}",
            color=cond_value(error, rx.color("red", 11), rx.color("gray", 12)),
            data_testid=test_id,
        ),
        spacing="1",
        width="100%",
    )


def _tool_icon(name: rx.Var[str]) -> rx.Component:
    color = rx.color("accent", 11)
    return match_component(
        name,
        *[(tool, rx.icon(icon, size=14, color=color)) for tool, icon in TOOL_ICONS.items()],
        rx.icon("wrench", size=14, color=color),
    )


def _tool_card(item: ObjectVar[ChatItem]) -> rx.Component:
    return rx.box(
        rx.el.details(
            rx.el.summary(
                rx.hstack(
                    rx.icon(
                        tag="chevron-right",
                        size=14,
                        class_name="mosoo-chevron",
                        color=rx.color("gray", 9),
                    ),
                    _tool_icon(item.name),
                    rx.text(
                        item.name,
                        size="2",
                        weight="bold",
                        font_family=MONO,
                        data_testid="tool-name",
                    ),
                    rx.cond(
                        item.server != "",
                        rx.badge(
                            "MCP",
                            size="1",
                            variant="soft",
                            title="Answered by the MCP server " + item.server.to(str),
                            data_testid="tool-mcp",
                        ),
                        rx.fragment(),
                    ),
                    rx.text(
                        item.summary,
                        size="1",
                        color=rx.color("gray", 11),
                        font_family=MONO,
                        truncate=True,
                        flex="1",
                        min_width="0",
                    ),
                    _status_chip(item),
                    align="center",
                    spacing="2",
                    width="100%",
                ),
                cursor="pointer",
                list_style="none",
                padding="8px 12px",
            ),
            rx.vstack(
                rx.cond(
                    item.input_text != "",
                    _code_block("Input", item.input_text, "tool-input"),
                    rx.fragment(),
                ),
                rx.cond(
                    (item.status == "done") | (item.status == "error"),
                    rx.vstack(
                        _code_block(
                            "Output",
                            cond_value(item.output_text != "", item.output_text, "(no output)"),
                            "tool-output",
                            item.is_error,
                        ),
                        rx.cond(
                            item.output_note != "",
                            rx.text(item.output_note, size="1", color=rx.color("gray", 10)),
                            rx.fragment(),
                        ),
                        spacing="1",
                        width="100%",
                    ),
                    rx.fragment(),
                ),
                padding="0 12px 12px 12px",
                spacing="3",
                width="100%",
            ),
            # Errors open by default: the owner needs to see what went wrong.
            open=item.is_error,
            class_name="mosoo-tool",
        ),
        border=cond_value(
            item.is_error, f"1px solid {rx.color('red', 6)}", f"1px solid {rx.color('gray', 5)}"
        ),
        border_radius="10px",
        background=rx.color("gray", 1),
        margin_left="38px",
        data_testid="chat-tool-card",
        data_status=item.status,
    )


def _permission_card(
    item: ObjectVar[ChatItem],
    answered: ArrayVar[Sequence[str]],
    on_allow: PermissionHandler,
    on_reject: PermissionHandler,
) -> rx.Component:
    pending = item.status == "pending"
    sent = answered.contains(item.request_id)
    return rx.box(
        rx.vstack(
            rx.hstack(
                rx.icon("shield-question", size=16, color=rx.color("amber", 11)),
                rx.text(
                    cond_value(pending, "Approval needed", "Approval"),
                    size="2",
                    weight="bold",
                ),
                rx.spacer(),
                rx.match(
                    item.status,
                    (
                        "allow_once",
                        rx.badge(
                            rx.icon("check", size=12),
                            "Allowed once",
                            color_scheme="green",
                            variant="soft",
                        ),
                    ),
                    (
                        "reject_once",
                        rx.badge(
                            rx.icon("x", size=12), "Rejected", color_scheme="red", variant="soft"
                        ),
                    ),
                    ("expired", rx.badge("No longer needed", color_scheme="gray", variant="soft")),
                    rx.cond(
                        sent,
                        rx.badge(
                            rx.spinner(size="1"),
                            "Answer sent",
                            color_scheme="gray",
                            variant="soft",
                            data_testid="permission-sent",
                        ),
                        rx.fragment(),
                    ),
                ),
                align="center",
                width="100%",
            ),
            rx.text(
                "The agent wants to use ",
                rx.code(item.name, size="2"),
                cond_value(item.summary != "", ": ", "."),
                size="2",
            ),
            rx.cond(
                item.summary != "",
                rx.box(
                    rx.el.pre(
                        item.summary,
                        margin="0",
                        white_space="pre-wrap",
                        overflow_wrap="anywhere",
                        font_family=MONO,
                        font_size="12px",
                    ),
                    padding="8px 10px",
                    border_radius="6px",
                    background=rx.color("gray", 2),
                    border=f"1px solid {rx.color('gray', 4)}",
                    width="100%",
                ),
                rx.fragment(),
            ),
            rx.cond(
                pending & ~sent,
                rx.hstack(
                    rx.button(
                        rx.icon("check", size=14),
                        "Allow once",
                        size="2",
                        color_scheme="green",
                        on_click=on_allow(item.request_id),
                        data_testid="permission-allow",
                    ),
                    rx.button(
                        rx.icon("x", size=14),
                        "Reject",
                        size="2",
                        variant="soft",
                        color_scheme="red",
                        on_click=on_reject(item.request_id),
                        data_testid="permission-reject",
                    ),
                    spacing="2",
                ),
                rx.fragment(),
            ),
            spacing="2",
            width="100%",
        ),
        padding="12px 14px",
        border_radius="10px",
        border=cond_value(
            pending, f"1px solid {rx.color('amber', 7)}", f"1px solid {rx.color('gray', 5)}"
        ),
        background=cond_value(pending, rx.color("amber", 2), rx.color("gray", 1)),
        margin_left="38px",
        data_testid="chat-permission",
        data_status=item.status,
    )


def _file_line(item: ObjectVar[ChatItem]) -> rx.Component:
    return rx.hstack(
        rx.icon("file", size=13, color=rx.color("gray", 10)),
        rx.text(item.status, size="1", color=rx.color("gray", 10)),
        rx.code(item.name, size="1", variant="ghost"),
        align="center",
        spacing="2",
        margin_left="38px",
        data_testid="chat-file-changed",
    )


def _network_line(item: ObjectVar[ChatItem]) -> rx.Component:
    """One decision of the egress proxy: "Refused evil.com:443 (not_allowed)"."""
    refused = item.status != "allowed"
    return rx.hstack(
        rx.icon(
            "globe", size=13, color=cond_value(refused, rx.color("red", 10), rx.color("gray", 10))
        ),
        rx.text(
            cond_value(
                item.status == "allowed",
                "Allowed",
                cond_value(item.status == "refused", "Refused", "Failed"),
            ),
            size="1",
            weight="medium",
            color=cond_value(refused, rx.color("red", 11), rx.color("gray", 10)),
        ),
        rx.code(item.code.to(str) + " " + item.name.to(str), size="1", variant="ghost"),
        rx.cond(
            refused,
            rx.text("(" + item.text.to(str) + ")", size="1", color=rx.color("gray", 10)),
            rx.fragment(),
        ),
        align="center",
        spacing="2",
        margin_left="38px",
        data_testid="chat-network",
        data_status=item.status,
    )


def _mcp_status_line(item: ObjectVar[ChatItem]) -> rx.Component:
    """An MCP server the run goes without: "MCP server weather unavailable: <reason>"."""
    return rx.hstack(
        rx.icon("unplug", size=13, color=rx.color("amber", 10), flex_shrink="0"),
        rx.text(
            "MCP server ",
            rx.code(item.name, size="1", variant="ghost"),
            " unavailable",
            rx.cond(item.text != "", rx.text(": ", item.text, as_="span"), rx.fragment()),
            size="1",
            color=rx.color("amber", 11),
        ),
        align="center",
        spacing="2",
        margin_left="38px",
        data_testid="chat-mcp-status",
        data_status=item.status,
    )


def _outputs_line(item: ObjectVar[ChatItem]) -> rx.Component:
    """The artifacts a run left in /workspace/outputs, each a download."""
    return rx.hstack(
        rx.icon("folder-output", size=13, color=rx.color("gray", 10)),
        rx.text("Outputs", size="1", color=rx.color("gray", 10)),
        rx.flex(
            rx.foreach(
                item.files,
                lambda f: download_link(
                    rx.badge(
                        rx.icon("download", size=11), f["path"], variant="soft", radius="full"
                    ),
                    f["id"],
                    "Download " + f["name"],
                    "chat-output-file",
                ),
            ),
            wrap="wrap",
            gap="4px",
        ),
        align="center",
        spacing="2",
        margin_left="38px",
        data_testid="chat-outputs",
    )


def _run_end(item: ObjectVar[ChatItem]) -> rx.Component:
    usage = rx.cond(
        item.usage_text != "",
        rx.hstack(
            rx.icon("coins", size=12),
            rx.text(item.usage_text, size="1"),
            align="center",
            spacing="1",
            color=rx.color("gray", 9),
            data_testid="chat-usage",
        ),
        rx.fragment(),
    )
    return match_component(
        item.status,
        (
            "failed",
            rx.vstack(
                rx.callout.root(
                    rx.callout.icon(rx.icon("triangle-alert", size=16)),
                    rx.callout.text(
                        rx.text("The run failed", weight="bold", as_="span"),
                        rx.cond(
                            item.text != "", rx.text(": ", item.text, as_="span"), rx.fragment()
                        ),
                        rx.text(
                            " (",
                            item.code,
                            ")",
                            as_="span",
                            color=rx.color("red", 10),
                            font_size="12px",
                        ),
                        rx.cond(
                            item.retryable,
                            rx.text(" Sending the message again may work.", as_="span"),
                            rx.fragment(),
                        ),
                    ),
                    color_scheme="red",
                    variant="surface",
                    size="1",
                    width="100%",
                    data_testid="chat-run-error",
                ),
                usage,
                margin_left="38px",
                spacing="1",
            ),
        ),
        (
            "cancelled",
            rx.hstack(
                rx.icon("circle-stop", size=13),
                rx.text("Stopped", size="1"),
                usage,
                align="center",
                spacing="2",
                color=rx.color("gray", 10),
                margin_left="38px",
                data_testid="chat-run-stopped",
            ),
        ),
        rx.box(usage, margin_left="38px"),
    )


def transcript_item(
    item: ObjectVar[ChatItem],
    answered: ArrayVar[Sequence[str]],
    on_allow: PermissionHandler,
    on_reject: PermissionHandler,
) -> rx.Component:
    return rx.box(
        rx.match(
            item.kind,
            ("user", _user_bubble(item)),
            ("assistant", _assistant_text(item.text)),
            ("thinking", _thinking(item.text)),
            ("tool", _tool_card(item)),
            ("permission", _permission_card(item, answered, on_allow, on_reject)),
            ("file", _file_line(item)),
            ("network", _network_line(item)),
            ("mcp_status", _mcp_status_line(item)),
            ("outputs", _outputs_line(item)),
            ("run_end", _run_end(item)),
            rx.fragment(),
        ),
        width="100%",
        key=item.key,
    )


def live_item(kind: rx.Var[str], text: rx.Var[str]) -> rx.Component:
    """The open assistant text or thinking block, updated in batches while it streams."""
    return match_component(
        kind,
        ("assistant", _assistant_text(text, streaming=True)),
        ("thinking", _thinking(text, streaming=True)),
        rx.fragment(),
    )


@rx.memo
def streaming_item(kind: rx.Var[str]) -> rx.Component:
    """`live_item` with the streaming text, as a component of its own: only it reads
    `LiveText`, so a push of the text re-renders it and not the transcript around it (a
    Reflex component without its own memo renders everything it holds when a state it
    reads changes)."""
    return live_item(kind, LiveText.text)


def preparing_line(preparing: rx.Var[str]) -> rx.Component:
    """The run waits for its environment's packages to be built (queued, then building), or
    for a hibernated Assistant's sandbox to be built again (waking)."""
    return rx.hstack(
        rx.spinner(size="1"),
        rx.cond(
            preparing == "waking",
            rx.text("Waking the assistant…", size="1"),
            rx.text(
                "Preparing environment…",
                rx.cond(
                    preparing == "building",
                    rx.text(" (building packages)", as_="span"),
                    rx.fragment(),
                ),
                size="1",
            ),
        ),
        align="center",
        spacing="2",
        color=rx.color("gray", 10),
        margin_left="38px",
        padding_y="6px",
        data_testid="chat-preparing",
        data_status=preparing,
    )


def working_indicator() -> rx.Component:
    return rx.hstack(
        rx.box(class_name="mosoo-dot"),
        rx.box(class_name="mosoo-dot", style={"animation_delay": "0.15s"}),
        rx.box(class_name="mosoo-dot", style={"animation_delay": "0.3s"}),
        spacing="1",
        margin_left="38px",
        padding_y="6px",
        data_testid="chat-working",
    )


CHAT_CSS = """
.mosoo-markdown p { margin: 0 0 0.6em 0; }
.mosoo-markdown p:last-child { margin-bottom: 0; }
.mosoo-markdown pre { overflow-x: auto; padding: 10px 12px; border-radius: 8px;
  background: var(--gray-3); font-size: 12px; }
.mosoo-markdown ul, .mosoo-markdown ol { margin: 0.2em 0 0.6em 1.3em; }
.mosoo-caret { display: inline-block; width: 7px; height: 15px; margin-left: 2px;
  vertical-align: text-bottom; background: var(--accent-9); animation: mosoo-blink 1s steps(2) infinite; }
.mosoo-tool > summary::-webkit-details-marker, details > summary::-webkit-details-marker { display: none; }
.mosoo-tool[open] .mosoo-chevron { transform: rotate(90deg); }
.mosoo-chevron { transition: transform 0.15s ease; }
.mosoo-dot { width: 6px; height: 6px; border-radius: 999px; background: var(--gray-9);
  animation: mosoo-bounce 1s infinite ease-in-out; }
@keyframes mosoo-blink { to { visibility: hidden; } }
@keyframes mosoo-bounce { 0%, 80%, 100% { opacity: 0.3; transform: translateY(0); }
  40% { opacity: 1; transform: translateY(-3px); } }
"""


def chat_styles() -> rx.Component:
    return rx.el.style(CHAT_CSS)


def transcript_view(
    items: ArrayVar[Sequence[ChatItem]],
    live_kind: rx.Var[str],
    working: rx.Var[bool],
    preparing: rx.Var[str],
    answered: ArrayVar[Sequence[str]],
    on_allow: PermissionHandler,
    on_reject: PermissionHandler,
    queued: ArrayVar[Sequence[ChatItem]],
) -> rx.Component:
    return rx.vstack(
        chat_styles(),
        rx.foreach(items, lambda item: transcript_item(item, answered, on_allow, on_reject)),
        streaming_item(kind=live_kind),
        # Before the run starts, the environment's build is what it waits for (not the agent).
        rx.cond(
            preparing != "",
            preparing_line(preparing),
            rx.cond(working & (live_kind == ""), working_indicator(), rx.fragment()),
        ),
        rx.foreach(queued, _queued_message),
        spacing="4",
        width="100%",
        data_testid="chat-transcript",
    )


def thread_transcript(state: type[ThreadChat], empty: rx.Component) -> rx.Component:
    """The live transcript of a page's `ThreadChat` state, kept scrolled to the newest, or
    `empty` until the thread has something to show."""
    return rx.auto_scroll(
        rx.cond(
            (state.items.length() > 0) | (state.live_kind != ""),
            transcript_view(
                state.items,
                state.live_kind,
                state.run_active & ~state.needs_approval,
                state.preparing,
                state.answered_requests,
                state.allow_once,
                state.reject,
                state.queued,
            ),
            empty,
        ),
        flex="1",
        min_height="0",
        width="100%",
        padding="20px",
    )


def chat_card(*children: rx.Component, height: str, min_height: str) -> rx.Component:
    """The card a chat fills: `children` top to bottom (transcript, composer, ...)."""
    return rx.card(
        rx.vstack(*children, spacing="0", height="100%", width="100%"),
        padding="0",
        height=height,
        min_height=min_height,
        flex="1",
        min_width="0",
        data_testid="chat-panel",
    )
