"""The console shell (sidebar with the App switcher and the App's sections, content on the
right) and what pages are built of: the page's column (`app_page` for a page inside an App,
with its not-found cards), its header, card sections, back links and the empty state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import reflex as rx
from reflex.vars import ArrayVar
from reflex_components_radix.themes.base import LiteralSpacing
from reflex_components_radix.themes.color_mode import ColorModeIconButton

from mosoo_web.components.icons import icon_tile
from mosoo_web.state.session import SessionState


def brand() -> rx.Component:
    return rx.hstack(
        icon_tile("box", 18, "5px", radius="8px", solid=True),
        rx.heading("Mosoo", size="5", weight="bold"),
        align="center",
        spacing="2",
    )


def nav_link(label: str, icon: str, href: rx.Var[str] | str, test_id: str) -> rx.Component:
    return rx.link(
        rx.hstack(
            rx.icon(icon, size=16),
            rx.text(label, size="2", weight="medium"),
            align="center",
            spacing="2",
        ),
        href=href,
        underline="none",
        color=rx.color("gray", 12),
        padding_x="10px",
        padding_y="7px",
        border_radius="6px",
        width="100%",
        _hover={"background": rx.color("gray", 4)},
        data_testid=test_id,
    )


def app_switcher() -> rx.Component:
    return rx.vstack(
        rx.text("App", size="1", color_scheme="gray", weight="medium"),
        rx.select.root(
            rx.select.trigger(width="100%", data_testid="app-switcher"),
            rx.select.content(
                rx.foreach(
                    SessionState.apps,
                    lambda app: rx.select.item(app["name"], value=app["id"]),
                ),
            ),
            value=SessionState.current_app_id,
            on_change=SessionState.switch_app,
        ),
        rx.link(
            rx.text("All Apps", size="1"),
            href="/apps",
            data_testid="all-apps-link",
        ),
        width="100%",
        spacing="1",
    )


def sidebar() -> rx.Component:
    app_base = "/apps/" + SessionState.current_app_id
    return rx.vstack(
        brand(),
        rx.cond(SessionState.current_app_id != "", app_switcher(), rx.fragment()),
        rx.cond(
            SessionState.current_app_id != "",
            rx.vstack(
                nav_link("Overview", "house", app_base, "nav-app-home"),
                nav_link("Agents", "bot", app_base + "/agents", "nav-agents"),
                nav_link("Threads", "messages-square", app_base + "/threads", "nav-threads"),
                nav_link("Files", "folder-open", app_base + "/files", "nav-files"),
                nav_link("Environments", "package", app_base + "/environments", "nav-environments"),
                nav_link("Skills", "book-open", app_base + "/skills", "nav-skills"),
                nav_link("MCP servers", "plug", app_base + "/mcp", "nav-mcp"),
                nav_link("Usage", "chart-column", app_base + "/usage", "nav-usage"),
                nav_link("Settings", "settings", app_base + "/settings", "nav-app-settings"),
                nav_link("Providers", "key-round", app_base + "/providers", "nav-providers"),
                width="100%",
                spacing="1",
            ),
            rx.vstack(nav_link("Apps", "layout-grid", "/apps", "nav-apps"), width="100%"),
        ),
        rx.spacer(),
        rx.divider(),
        rx.vstack(
            nav_link("Organization", "building-2", "/org", "nav-org"),
            nav_link("Profile", "user", "/profile", "nav-profile"),
            nav_link("Access tokens", "key-square", "/tokens", "nav-tokens"),
            width="100%",
            spacing="1",
        ),
        rx.hstack(
            rx.vstack(
                rx.text(SessionState.name, size="2", weight="medium", truncate=True),
                rx.text(SessionState.email, size="1", color_scheme="gray", truncate=True),
                spacing="1",
                min_width="0",
                overflow="hidden",
            ),
            rx.spacer(),
            # What `rx.color_mode.button` is: Reflex's stub types `rx.color_mode` as a plain Var.
            ColorModeIconButton.create(size="1", variant="ghost"),
            width="100%",
            align="center",
        ),
        rx.button(
            rx.icon("log-out", size=14),
            "Sign out",
            variant="soft",
            color_scheme="gray",
            width="100%",
            on_click=SessionState.sign_out,
            data_testid="sign-out",
        ),
        width="240px",
        min_width="240px",
        height="100vh",
        position="sticky",
        top="0",
        padding="16px",
        spacing="4",
        border_right=f"1px solid {rx.color('gray', 5)}",
        background=rx.color("gray", 2),
    )


def loading() -> rx.Component:
    return rx.center(rx.spinner(size="3"), height="100vh", width="100%")


def console_shell(content: Callable[[], rx.Component], max_width: str = "880px") -> rx.Component:
    """Wraps a page: nothing of it renders until the guard has resolved the account.
    Work surfaces (Preview) pass a wider `max_width`."""
    return rx.cond(
        SessionState.signed_in,
        rx.hstack(
            sidebar(),
            rx.box(
                rx.box(content(), max_width=max_width, width="100%", margin_x="auto"),
                flex="1",
                min_width="0",
                padding_x=["16px", "24px", "40px"],
                padding_y="32px",
            ),
            spacing="0",
            width="100%",
            align="start",
        ),
        loading(),
    )


def missing_card(
    title: str,
    back_label: str,
    back_href: rx.Var[str] | str,
    test_id: str,
    detail: str = "It does not exist, or it is not yours.",
) -> rx.Component:
    """What a page shows for an id that is not there — or not the viewer's: the two are
    told apart nowhere, so nobody learns what exists in another owner's account."""
    return rx.card(
        rx.vstack(
            rx.heading(title, size="5"),
            rx.text(detail, color_scheme="gray"),
            rx.link(back_label, href=back_href),
            spacing="2",
        ),
        data_testid=test_id,
    )


def not_found_card() -> rx.Component:
    """An App page's card for an App id that is not there (or not the viewer's)."""
    return missing_card("App not found", "Back to your Apps", "/apps", "app-not-found")


def page_column(*children: rx.Component, spacing: LiteralSpacing = "4") -> rx.Component:
    """A page's content, top to bottom."""
    return rx.vstack(*children, width="100%", spacing=spacing)


def app_page(
    *children: rx.Component,
    spacing: LiteralSpacing = "4",
    item_missing: rx.Var[bool] | None = None,
    item_missing_card: rx.Component | None = None,
) -> rx.Component:
    """The content of a page inside an App (`/apps/[app_id]/...`): the App's not-found card
    when the App is missing; for a page about one item (an Agent, a thread),
    `item_missing_card` while `item_missing`; else `children`."""
    content = page_column(*children, spacing=spacing)
    if item_missing is not None and item_missing_card is not None:
        content = rx.cond(item_missing, item_missing_card, content)
    return rx.cond(SessionState.app_missing, not_found_card(), content)


def empty_state(icon: str, *children: rx.Component, test_id: str) -> rx.Component:
    """What a list shows when it has nothing: an icon over a few words (and a way on)."""
    return rx.card(
        rx.vstack(
            rx.icon(icon, size=28, color=rx.color("gray", 9)),
            *children,
            align="center",
            spacing="2",
            padding_y="24px",
        ),
        width="100%",
        data_testid=test_id,
    )


def empty_note(*text: rx.Var[str] | str, max_width: str = "420px") -> rx.Component:
    """The explanation in an empty state."""
    return rx.text(*text, size="2", color_scheme="gray", text_align="center", max_width=max_width)


def back_link(label: str, href: rx.Var[str] | str, test_id: str = "") -> rx.Component:
    """ "← Agents" over an item's page: back to the list it came from."""
    test_props: dict[str, Any] = {"data_testid": test_id} if test_id else {}
    return rx.link(
        rx.hstack(
            rx.icon("arrow-left", size=14), rx.text(label, size="2"), align="center", spacing="1"
        ),
        href=href,
        color_scheme="gray",
        underline="none",
        **test_props,
    )


def side_by_side(*children: rx.Component) -> rx.Component:
    """Columns next to each other on a wide screen, stacked on a narrow one."""
    return rx.flex(
        *children,
        direction=rx.breakpoints(initial="column", md="row"),
        gap="16px",
        width="100%",
        align="start",
    )


def page_header(title: rx.Var[str] | str, subtitle: rx.Var[str] | str = "") -> rx.Component:
    return rx.vstack(
        rx.heading(title, size="7", weight="bold", data_testid="page-title"),
        rx.text(subtitle, color_scheme="gray", size="2"),
        spacing="1",
        margin_bottom="24px",
    )


def list_page(
    title: str,
    action: rx.Component,
    description: str,
    *,
    loaded: rx.Var[bool],
    rows: ArrayVar[Any],
    row: Callable[[Any], rx.Component],
    empty: rx.Component | None = None,
    notices: tuple[rx.Component, ...] = (),
) -> rx.Component:
    """An App's page that lists one kind of thing (environments, skills, MCP servers): the
    title with its action on the right, what the things are, any `notices` (an upload's
    error), then one card per row once loaded, or `empty` when there are none."""
    listed = rx.vstack(rx.foreach(rows, row), width="100%", spacing="2")
    body = listed if empty is None else rx.cond(rows.length() > 0, listed, empty)
    return app_page(
        rx.hstack(
            page_header(title, SessionState.current_app_name),
            rx.spacer(),
            action,
            align="start",
            width="100%",
        ),
        rx.text(description, size="2", color_scheme="gray"),
        *notices,
        rx.cond(loaded, body, rx.fragment()),
        spacing="3",
    )


def item_card(
    icon: str,
    href: rx.Var[str],
    *,
    title: tuple[rx.Component, ...],
    lines: tuple[rx.Component, ...],
    actions: rx.Component,
    error: rx.Component,
    test_id: str,
) -> rx.Component:
    """One row of a `list_page`: the icon, `title` (name and badges) over its `lines`, all a
    link to the item (`{test_id}-open`); `actions` on the right; an action's `error` below."""
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.link(
                    rx.hstack(
                        icon_tile(icon, 18, "7px", radius="9px"),
                        rx.vstack(
                            rx.hstack(*title, align="center", spacing="2", wrap="wrap"),
                            *lines,
                            spacing="1",
                            min_width="0",
                        ),
                        align="center",
                        spacing="3",
                    ),
                    href=href,
                    underline="none",
                    color="inherit",
                    flex="1",
                    min_width="0",
                    data_testid=f"{test_id}-open",
                ),
                actions,
                align="center",
                spacing="3",
                width="100%",
            ),
            error,
            spacing="2",
            width="100%",
        ),
        width="100%",
        data_testid=f"{test_id}-row",
    )


def stat_card(label: str, value: rx.Var[str], test_id: str) -> rx.Component:
    """One figure with its label (a cost, a count), side by side with others in a flex row."""
    return rx.card(
        rx.vstack(
            rx.text(label, size="1", color_scheme="gray", weight="medium"),
            rx.heading(value, size="6", data_testid=test_id),
            spacing="1",
        ),
        flex="1",
        min_width="160px",
    )


def card_section(
    title: rx.Var[str] | str, description: str, *children: rx.Component
) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading(title, size="4"),
            rx.text(description, size="2", color_scheme="gray"),
            *children,
            spacing="3",
            width="100%",
        ),
        width="100%",
        size="3",
    )
