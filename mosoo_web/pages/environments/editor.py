"""`/apps/[app_id]/environments/[environment_id]`: one environment's editor (its current
revision as a form with one Save, and the build of its packages) beside the list of its
revisions; `new` creates one."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex.vars import ObjectVar

from mosoo_core.environments import MASK
from mosoo_web.components.chat import MONO
from mosoo_web.components.forms import choice_cards, error_text, labelled, save_bar
from mosoo_web.components.layout import (
    app_page,
    back_link,
    card_section,
    console_shell,
    missing_card,
    side_by_side,
)
from mosoo_web.pages.environments.editor_state import EnvironmentEditorState as State
from mosoo_web.pages.environments.labels import (
    BUILD_COLORS,
    BUILD_LABELS,
    FULL_WARNING,
    POLICY_CHOICES,
)
from mosoo_web.pages.environments.list import environments_href
from mosoo_web.pages.environments.services import RevisionRow, VariableRow
from mosoo_web.reflex_typing import cond_value, match_component, match_value

PACKAGES_HINT = (
    "Exact versions, one per line, installed in every sandbox of the revision. Saving "
    "changed packages queues their build; a run waits for it."
)


def _error(field: str) -> rx.Var[str]:
    return State.field_errors.to(dict[str, str]).get(field, "")


def _hint(text: str | rx.Var[str], test_id: str = "") -> rx.Component:
    props: dict[str, Any] = {"data_testid": test_id} if test_id else {}
    return rx.text(text, size="1", color_scheme="gray", **props)


def _lines_area(field: str, value: rx.Var[str], placeholder: str, test_id: str) -> rx.Component:
    return rx.text_area(
        name=field,
        default_value=value,
        placeholder=placeholder,
        rows="3",
        resize="vertical",
        font_family="monospace",
        width="100%",
        data_testid=test_id,
    )


def _header() -> rx.Component:
    return rx.hstack(
        back_link("Environments", environments_href(), "environments-back"),
        rx.text("/", color_scheme="gray", size="2"),
        rx.heading(
            cond_value(State.is_new, "New environment", State.name),
            size="5",
            weight="bold",
            data_testid="page-title",
        ),
        rx.cond(State.is_default, rx.badge("Default", color_scheme="green"), rx.fragment()),
        rx.cond(
            State.is_new,
            rx.fragment(),
            rx.badge(
                "Revision " + State.revision.to_string(),
                variant="soft",
                color_scheme="gray",
                data_testid="environment-revision",
            ),
        ),
        align="center",
        spacing="2",
        width="100%",
        margin_bottom="16px",
    )


def _packages() -> rx.Component:
    return card_section(
        "Packages",
        PACKAGES_HINT,
        labelled(
            "pip packages",
            _lines_area("pip", State.form_pip, "requests==2.32.3", "environment-pip"),
            error=_error("pip"),
            test_id="environment-pip",
            hint=_hint("name==version, from PyPI. Built once per revision.", "pip-hint"),
        ),
        labelled(
            "npm packages",
            _lines_area("npm", State.form_npm, "lodash@4.17.21", "environment-npm"),
            error=_error("npm"),
            test_id="environment-npm",
            hint=_hint("name@version, from the npm registry. Built once per revision.", "npm-hint"),
        ),
    )


def _build_badge() -> rx.Component:
    return rx.badge(
        match_component(
            State.build_status,
            ("queued", rx.icon("clock", size=12)),
            ("building", rx.spinner(size="1")),
            ("ready", rx.icon("check", size=12)),
            ("failed", rx.icon("circle-x", size=12)),
            rx.fragment(),
        ),
        match_value(State.build_status, *BUILD_LABELS.items(), State.build_status),
        variant="soft",
        color_scheme=match_value(State.build_status, *BUILD_COLORS.items(), "gray"),
        data_testid="build-status",
    )


def _build_log() -> rx.Component:
    return rx.auto_scroll(
        rx.el.pre(
            cond_value(
                State.build_log != "",
                State.build_log,
                cond_value(State.build_active, "Waiting for the build to start…", "(no output)"),
            ),
            margin="0",
            white_space="pre-wrap",
            overflow_wrap="anywhere",
            font_family=MONO,
            font_size="12px",
            line_height="1.5",
        ),
        max_height="320px",
        width="100%",
        padding="8px 10px",
        border_radius="6px",
        background=rx.color("gray", 2),
        border=f"1px solid {rx.color('gray', 4)}",
        data_testid="build-log",
    )


def _build_panel() -> rx.Component:
    """The current revision's package build: its status, live log, error and Rebuild."""
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.heading("Build", size="4"),
                _build_badge(),
                rx.cond(
                    State.build_finished != "",
                    _hint("Finished " + State.build_finished, "build-finished"),
                    rx.fragment(),
                ),
                rx.spacer(),
                rx.button(
                    rx.icon("refresh-cw", size=14),
                    "Rebuild",
                    type="button",
                    size="2",
                    variant="soft",
                    disabled=State.build_active,
                    loading=State.rebuilding,
                    on_click=State.rebuild,
                    data_testid="build-rebuild",
                ),
                align="center",
                spacing="2",
                width="100%",
            ),
            rx.text(
                "The packages of the current revision, installed once for every sandbox that "
                "starts from it. A run waits for the build; if it fails, the run fails with the "
                "log. Rebuild after an index served an error, or to pick up a fixed release.",
                size="2",
                color_scheme="gray",
            ),
            rx.cond(
                State.build_error != "",
                rx.callout(
                    State.build_error,
                    icon="triangle-alert",
                    color_scheme="red",
                    size="1",
                    width="100%",
                    data_testid="build-error",
                ),
                rx.fragment(),
            ),
            _build_log(),
            error_text(State.build_message, "build-rebuild-error"),
            spacing="3",
            width="100%",
        ),
        width="100%",
        size="3",
        data_testid="environment-build",
    )


def _setup_script() -> rx.Component:
    return card_section(
        "Setup script",
        "Runs in each new sandbox before the agent starts, with every variable below. If it "
        "fails, the run fails with its output.",
        labelled(
            "Script",
            rx.text_area(
                name="setup_script",
                default_value=State.form_setup_script,
                placeholder="#!/bin/sh\nset -e\n…",
                rows="8",
                resize="vertical",
                font_family="monospace",
                width="100%",
                data_testid="environment-setup-script",
            ),
            error=_error("setup_script"),
            test_id="environment-setup-script",
        ),
    )


def _variable_row(row: ObjectVar[VariableRow]) -> rx.Component:
    return rx.table.row(
        rx.table.cell(
            rx.input(
                name="var-name-" + row.key.to(str),
                default_value=row.name,
                placeholder="NAME",
                max_length=128,
                font_family="monospace",
                width="100%",
                data_testid="variable-name",
            ),
        ),
        rx.table.cell(
            rx.vstack(
                rx.input(
                    name="var-value-" + row.key.to(str),
                    default_value=row.value,
                    type=cond_value(row.secret, "password", "text"),
                    auto_complete="new-password",
                    placeholder=cond_value(
                        row.stored_secret & row.secret,
                        MASK,
                        cond_value(row.secret, "Secret value", ""),
                    ),
                    width="100%",
                    data_testid="variable-value",
                ),
                rx.cond(
                    row.stored_secret & row.secret,
                    _hint("Stored. Leave empty to keep the stored value.", "variable-secret-hint"),
                    rx.fragment(),
                ),
                spacing="1",
                width="100%",
            ),
        ),
        rx.table.cell(
            rx.switch(
                checked=row.secret,
                on_change=lambda value: State.set_variable_secret(row.key, value),
                data_testid="variable-secret",
            ),
        ),
        rx.table.cell(
            rx.switch(
                checked=row.setup_only,
                on_change=lambda value: State.set_variable_setup_only(row.key, value),
                data_testid="variable-setup-only",
            ),
        ),
        rx.table.cell(
            rx.icon_button(
                rx.icon("x", size=14),
                size="1",
                variant="ghost",
                color_scheme="gray",
                type="button",
                on_click=State.remove_variable(row.key),
                aria_label="Remove variable",
                data_testid="variable-remove",
            ),
        ),
        # Keyed by the row, not its place: removing a row leaves what was typed in the others.
        key=row.key,
        align="center",
        data_testid="variable-row",
    )


def _variables() -> rx.Component:
    return card_section(
        "Variables",
        "Set in the sandbox's environment. Secrets are stored encrypted and never shown again; "
        "setup only variables are there for the setup script, not for the agent.",
        rx.cond(
            State.variables.length() > 0,
            rx.table.root(
                rx.table.header(
                    rx.table.row(
                        rx.table.column_header_cell("Name", width="34%"),
                        rx.table.column_header_cell("Value"),
                        rx.table.column_header_cell("Secret", width="72px"),
                        rx.table.column_header_cell("Setup only", width="88px"),
                        rx.table.column_header_cell("", width="40px"),
                    ),
                ),
                rx.table.body(rx.foreach(State.variables, _variable_row)),
                size="1",
                width="100%",
            ),
            _hint("No variables."),
        ),
        rx.button(
            rx.icon("plus", size=14),
            "Add variable",
            type="button",
            size="1",
            variant="soft",
            on_click=State.add_variable,
            data_testid="variable-add",
        ),
        error_text(_error("variables"), "environment-variables-error", "1"),
    )


def _network() -> rx.Component:
    limited = State.network_policy == "limited"
    return card_section(
        "Network",
        "What the sandbox may reach. Limited is enforced by Mosoo's egress proxy, which "
        "refuses private addresses and records every request.",
        labelled(
            "Policy",
            choice_cards(
                POLICY_CHOICES,
                State.network_policy,
                State.set_policy,
                "network",
                columns=rx.breakpoints(initial="1", sm="3"),
            ),
            error=_error("network_policy"),
            test_id="environment-network-policy",
        ),
        rx.cond(
            State.network_policy == "full",
            rx.callout(
                FULL_WARNING,
                icon="triangle-alert",
                color_scheme="amber",
                width="100%",
                data_testid="network-full-warning",
            ),
            rx.fragment(),
        ),
        # Kept mounted while hidden: switching the policy back keeps the hosts typed.
        labelled(
            "Allowed hosts",
            _lines_area(
                "allowed_hosts",
                State.form_allowed_hosts,
                "api.example.com\n*.githubusercontent.com",
                "environment-allowed-hosts",
            ),
            error=_error("allowed_hosts"),
            test_id="environment-allowed-hosts",
            hint=_hint(
                "One per line: a host name, *.domain for its subdomains, host:port for a port "
                "other than 80 and 443. No IP addresses."
            ),
            display=cond_value(limited, "flex", "none"),
        ),
        rx.hstack(
            rx.switch(
                checked=State.allow_package_indexes,
                on_change=State.set_package_indexes,
                data_testid="environment-package-indexes",
            ),
            rx.text("Allow package indexes (PyPI and npm)", size="2", as_="label"),
            align="center",
            spacing="2",
            display=cond_value(limited, "flex", "none"),
        ),
        error_text(_error("allow_package_indexes"), "environment-package-indexes-error", "1"),
    )


def _save_bar() -> rx.Component:
    return save_bar(
        _error("form"),
        is_new=State.is_new,
        create_label="Create environment",
        saving=State.saving,
        test_id="environment-save",
    )


def _form() -> rx.Component:
    return rx.form(
        rx.vstack(
            rx.cond(
                State.is_new,
                card_section(
                    "Name",
                    "Shown in the Environments list and the Preview environment picker.",
                    labelled(
                        "Name",
                        rx.input(
                            name="name",
                            placeholder="e.g. Data tools",
                            max_length=80,
                            width="100%",
                            auto_focus=True,
                            data_testid="environment-name-input",
                        ),
                        error=_error("name"),
                        test_id="environment-name",
                    ),
                ),
                rx.fragment(),
            ),
            _setup_script(),
            _variables(),
            _network(),
            _packages(),
            _save_bar(),
            spacing="4",
            width="100%",
        ),
        # Re-mounted with the saved revision after a save, never after a refusal.
        key=State.form_version,
        on_submit=State.save,
        reset_on_submit=False,
        width="100%",
    )


def _editor() -> rx.Component:
    return rx.vstack(
        _form(),
        # Under Save: the build of the revision saved last (not of what the form holds now).
        rx.cond(State.build_status != "", _build_panel(), rx.fragment()),
        spacing="4",
        width="100%",
        flex="1",
        min_width="0",
    )


def _revision(row: ObjectVar[RevisionRow]) -> rx.Component:
    return rx.hstack(
        rx.badge("#" + row.number.to_string(), variant="soft", color_scheme="gray"),
        rx.vstack(
            rx.text(row.summary, size="2", data_testid="revision-summary"),
            rx.text(row.created, size="1", color_scheme="gray"),
            spacing="0",
            min_width="0",
        ),
        align="start",
        spacing="2",
        width="100%",
        data_testid="revision-row",
    )


def _revisions() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Revisions", size="3"),
            _hint("Newest first. A thread keeps the revision it started with."),
            rx.foreach(State.revisions, _revision),
            spacing="3",
            width="100%",
        ),
        width=["100%", "100%", "300px"],
        flex_shrink="0",
        data_testid="environment-revisions",
    )


def _content() -> rx.Component:
    return app_page(
        _header(),
        rx.cond(
            State.loaded,
            side_by_side(_editor(), rx.cond(State.is_new, rx.fragment(), _revisions())),
            rx.fragment(),
        ),
        spacing="0",
        item_missing=State.missing,
        item_missing_card=missing_card(
            "Environment not found",
            "Back to Environments",
            environments_href(),
            "environment-not-found",
        ),
    )


def environment_page() -> rx.Component:
    return console_shell(_content, max_width="1200px")
