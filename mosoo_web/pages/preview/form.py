"""The Preview form: every field of the Agent, each saving on its own (text a moment after
typing stops and on leaving the field, choices at once). A refused value is explained next
to its field (`PreviewState.field_errors`) and the last good value stays."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex.event import EventCallback

from mosoo_core import agents
from mosoo_web.components.forms import labelled
from mosoo_web.pages.preview.fields import (
    DEFAULT_EFFORT,
    DEFAULT_ENVIRONMENT,
    FIELD_TARGETS,
    NO_PROVIDER,
    SAVE_DEBOUNCE_MS,
    TOOL_DESCRIPTIONS,
)
from mosoo_web.pages.preview.mcp_picker import mcp_picker
from mosoo_web.pages.preview.pool_panel import pool_panel
from mosoo_web.pages.preview.readiness import pending_changes, readiness_callouts
from mosoo_web.pages.preview.sandbox_panel import sandbox_panel
from mosoo_web.pages.preview.state import PreviewState
from mosoo_web.reflex_typing import cond_value, match_component
from mosoo_web.state.session import SessionState


def _field(
    label: str,
    field_name: str,
    control: rx.Component,
    test_id: str,
    hint: rx.Component | None = None,
) -> rx.Component:
    """A labelled field with its refusal (`<test_id>-error`); a readiness blocker's "Fix"
    button scrolls to it (`FIELD_TARGETS`)."""
    return labelled(
        label,
        control,
        error=PreviewState.field_errors.to(dict[str, str]).get(field_name, ""),
        test_id=test_id,
        hint=hint,
        error_size="1",
        id=FIELD_TARGETS.get(field_name),
        scroll_margin_top="16px",
    )


def _save_indicator() -> rx.Component:
    return match_component(
        PreviewState.save_label,
        ("", rx.fragment()),
        (
            "Saving…",
            rx.text("Saving…", size="1", color_scheme="gray", data_testid="save-indicator"),
        ),
        (
            "Saved",
            rx.hstack(
                rx.icon("check", size=12),
                rx.text("Saved", size="1"),
                color=rx.color("green", 11),
                align="center",
                spacing="1",
                data_testid="save-indicator",
            ),
        ),
        rx.text(
            PreviewState.save_label,
            size="1",
            color_scheme="red",
            text_align="right",
            data_testid="save-indicator",
        ),
    )


def _form_header() -> rx.Component:
    return rx.vstack(
        rx.hstack(
            rx.text("Configuration", size="3", weight="bold", flex_shrink="0"),
            rx.spacer(),
            _save_indicator(),
            align="center",
            spacing="3",
            width="100%",
        ),
        rx.text(
            "Changes save as you go. Model, prompt, tools and options apply to the next message: "
            "every run starts a fresh driver with the current settings.",
            size="1",
            color_scheme="gray",
        ),
        spacing="1",
        width="100%",
        # The indicator stays in sight while the long form scrolls.
        position="sticky",
        top="-16px",
        margin_top="-16px",
        padding_y="12px",
        background=rx.color("gray", 1),
        border_bottom=f"1px solid {rx.color('gray', 4)}",
        z_index="1",
    )


def _runtime_select() -> rx.Component:
    return rx.select.root(
        rx.select.trigger(width="100%", data_testid="agent-runtime"),
        rx.select.content(
            *[
                rx.select.item(
                    runtime.label if runtime.implemented else runtime.label + " (coming later)",
                    value=name,
                    disabled=not runtime.implemented,
                )
                for name, runtime in agents.RUNTIMES.items()
            ],
        ),
        value=PreviewState.runtime,
        on_change=PreviewState.set_runtime,
    )


def _provider_select() -> rx.Component:
    return rx.vstack(
        rx.select.root(
            rx.select.trigger(
                placeholder="Choose a provider key", width="100%", data_testid="agent-provider"
            ),
            rx.select.content(
                rx.select.item("No provider key", value=NO_PROVIDER),
                rx.foreach(
                    PreviewState.providers,
                    lambda option: rx.select.item(
                        cond_value(option.is_default, option.name + " (default)", option.name),
                        value=option.id,
                    ),
                ),
            ),
            value=PreviewState.provider_id,
            on_change=PreviewState.choose_provider,
        ),
        rx.cond(
            PreviewState.providers.length() == 0,
            rx.text(
                "No provider keys in this App yet. ",
                rx.link("Add one", href="/apps/" + SessionState.current_app_id + "/providers"),
                size="1",
                color_scheme="gray",
            ),
            rx.fragment(),
        ),
        spacing="1",
        width="100%",
    )


def _model_field() -> rx.Component:
    return rx.vstack(
        _text_input(
            PreviewState.model,
            PreviewState.save_model,
            "agent-model",
            # Re-mounted with the new value when a model is picked from the list below.
            key=PreviewState.model_version,
            placeholder="e.g. gpt-4o-mini",
            max_length=200,
            font_family="monospace",
        ),
        rx.cond(
            PreviewState.provider_models.length() > 0,
            rx.flex(
                rx.foreach(
                    PreviewState.provider_models,
                    lambda name: rx.badge(
                        name,
                        variant=cond_value(PreviewState.model == name, "solid", "soft"),
                        color_scheme=cond_value(PreviewState.model == name, "iris", "gray"),
                        cursor="pointer",
                        on_click=PreviewState.set_model(name),
                        data_testid="agent-model-choice",
                    ),
                ),
                wrap="wrap",
                gap="6px",
            ),
            rx.fragment(),
        ),
        spacing="2",
        width="100%",
    )


def _policy_control(tool: str, with_ask: bool) -> rx.Component:
    items = [
        rx.segmented_control.item("Off", value="off"),
        rx.segmented_control.item("Allow", value="allow"),
    ]
    if with_ask:
        items.append(rx.segmented_control.item("Ask", value="ask"))
    return rx.segmented_control.root(
        *items,
        value=PreviewState.tools.to(dict[str, str])[tool],
        on_change=lambda value: PreviewState.set_tool_policy(tool, value),
        size="1",
        data_testid=f"tool-{tool}",
    )


def _tool_row(tool: str) -> rx.Component:
    # The runtime's own name for the tool ("Bash" in Claude Code), Mosoo's beside it when
    # they differ.
    label = PreviewState.tool_labels.to(dict[str, str])[tool]
    return rx.hstack(
        rx.vstack(
            rx.hstack(
                rx.text(
                    cond_value(label, label, tool),
                    size="2",
                    weight="bold",
                    font_family="monospace",
                    data_testid=f"tool-name-{tool}",
                ),
                rx.cond(
                    label & (label != tool),
                    rx.text(tool, size="1", color_scheme="gray", font_family="monospace"),
                    rx.fragment(),
                ),
                spacing="2",
                align="baseline",
            ),
            rx.text(TOOL_DESCRIPTIONS[tool], size="1", color_scheme="gray"),
            spacing="0",
        ),
        rx.spacer(),
        # "Ask" needs a runtime that can pause for a permission request.
        rx.cond(PreviewState.can_ask, _policy_control(tool, True), _policy_control(tool, False)),
        align="center",
        width="100%",
        padding_y="4px",
    )


def _option_input(key: str, label: str, placeholder: str, mode: str, test_id: str) -> rx.Component:
    handler = (
        PreviewState.save_temperature if key == "temperature" else PreviewState.save_max_tokens
    )
    return _field(
        label,
        key,
        _text_input(
            PreviewState.form_temperature if key == "temperature" else PreviewState.form_max_tokens,
            handler,
            test_id,
            name=key,
            placeholder=placeholder,
            input_mode=mode,
        ),
        test_id,
    )


def _provider_options() -> rx.Component:
    return _field(
        "Provider options",
        "provider_options",
        rx.vstack(
            rx.hstack(
                _option_input(
                    "temperature", "Temperature", "0 to 2", "decimal", "agent-temperature"
                ),
                _option_input(
                    "max_tokens", "Max tokens", "1 to 200000", "numeric", "agent-max-tokens"
                ),
                spacing="3",
                width="100%",
                align="start",
            ),
            # Only where the runtime streams the model's thinking.
            rx.cond(
                PreviewState.can_think,
                _field(
                    "Reasoning effort",
                    "reasoning_effort",
                    rx.select.root(
                        rx.select.trigger(width="100%", data_testid="agent-reasoning-effort"),
                        rx.select.content(
                            rx.select.item("Provider default", value=DEFAULT_EFFORT),
                            *[
                                rx.select.item(effort.capitalize(), value=effort)
                                for effort in agents.REASONING_EFFORTS
                            ],
                        ),
                        value=PreviewState.reasoning_effort,
                        on_change=PreviewState.set_reasoning_effort,
                    ),
                    "agent-reasoning-effort",
                ),
                rx.fragment(),
            ),
            spacing="2",
            width="100%",
        ),
        "agent-provider-options",
        rx.text(
            "Optional. Leave empty to use the provider's default.", size="1", color_scheme="gray"
        ),
    )


def _environment_select() -> rx.Component:
    return rx.vstack(
        rx.select.root(
            rx.select.trigger(width="100%", data_testid="agent-environment"),
            rx.select.content(
                rx.select.item("Default environment", value=DEFAULT_ENVIRONMENT),
                rx.foreach(
                    PreviewState.environments,
                    lambda option: rx.select.item(option.label, value=option.id),
                ),
                # A bound environment that does not exist (readiness blocks it) stays visible
                # so the owner sees what is bound and can switch back to the default.
                rx.cond(
                    PreviewState.environment_missing,
                    rx.select.item(
                        "Missing: " + PreviewState.environment_id, value=PreviewState.environment_id
                    ),
                    rx.fragment(),
                ),
            ),
            value=PreviewState.environment_id,
            on_change=PreviewState.choose_environment,
        ),
        rx.text(
            "Default environment is the App's default (",
            PreviewState.default_environment,
            "). ",
            rx.link(
                "Manage environments",
                href="/apps/" + SessionState.current_app_id + "/environments",
                data_testid="agent-environment-manage",
            ),
            size="1",
            color_scheme="gray",
        ),
        spacing="1",
        width="100%",
    )


def _skill_row(row: Any) -> rx.Component:
    """One bound skill: its name, the version it follows or keeps, remove."""
    return rx.hstack(
        rx.cond(
            row.missing,
            rx.badge("Missing", color_scheme="amber", variant="soft"),
            rx.fragment(),
        ),
        rx.text(row.label, size="1", flex="1", data_testid="agent-skill-name"),
        rx.cond(
            row.missing,
            rx.fragment(),
            rx.select.root(
                rx.select.trigger(size="1", data_testid="agent-skill-version"),
                rx.select.content(
                    rx.foreach(
                        row.versions,
                        lambda version: rx.select.item(
                            cond_value(version == "latest", "Latest version", "Version " + version),
                            value=version,
                        ),
                    )
                ),
                value=row.version,
                on_change=lambda version: PreviewState.pin_skill(row.skill_id, version),
                size="1",
            ),
        ),
        rx.icon_button(
            rx.icon("x", size=12),
            size="1",
            variant="ghost",
            color_scheme="gray",
            type="button",
            on_click=PreviewState.remove_skill(row.binding),
            aria_label="Remove",
            data_testid="agent-skills-remove",
        ),
        align="center",
        width="100%",
        data_testid="agent-skills-bound",
    )


def _skills_picker() -> rx.Component:
    """The bound skills (each following the latest version or keeping one) and the App's
    other skills to add."""
    return rx.vstack(
        rx.foreach(PreviewState.skill_rows, _skill_row),
        rx.cond(
            PreviewState.unbound_skills.length() > 0,
            rx.select.root(
                rx.select.trigger(placeholder="Add a skill", data_testid="agent-skills-add"),
                rx.select.content(
                    rx.foreach(
                        PreviewState.unbound_skills,
                        lambda option: rx.select.item(option.name, value=option.id),
                    )
                ),
                value="",
                on_change=PreviewState.add_skill,
            ),
            rx.text(
                cond_value(
                    PreviewState.skill_options.length() > 0,
                    "Every skill of this App is bound.",
                    "No skills in this App yet: upload one on the Skills page.",
                ),
                size="1",
                color_scheme="gray",
                data_testid="agent-skills-empty",
            ),
        ),
        spacing="1",
        width="100%",
    )


def _bindings() -> rx.Component:
    return rx.fragment(
        _field("Environment", "environment_id", _environment_select(), "agent-environment"),
        _field("Skills", "skills", _skills_picker(), "agent-skills"),
        _field("MCP servers", "mcp_servers", mcp_picker(), "agent-mcp-servers"),
    )


def _autosaved(value: rx.Var[str], handler: EventCallback[str], test_id: str) -> dict[str, Any]:
    """A text field's saved value and its saves: a moment after typing stops, and on leaving it."""
    return {
        "default_value": value,
        "on_change": handler.debounce(SAVE_DEBOUNCE_MS),
        "on_blur": handler,
        "width": "100%",
        "data_testid": test_id,
    }


def _text_input(
    value: rx.Var[str], handler: EventCallback[str], test_id: str, **props: Any
) -> rx.Component:
    return rx.input(**_autosaved(value, handler, test_id), **props)


def _text_area(
    value: rx.Var[str], handler: EventCallback[str], test_id: str, **props: Any
) -> rx.Component:
    return rx.text_area(**_autosaved(value, handler, test_id), resize="vertical", **props)


def agent_form() -> rx.Component:
    """The whole form: header, what blocks the Agent, then every field."""
    return rx.box(
        rx.vstack(
            _form_header(),
            readiness_callouts(),
            pending_changes(),
            sandbox_panel(),
            pool_panel(),
            _field(
                "Name",
                "name",
                _text_input(
                    PreviewState.form_name,
                    PreviewState.save_name,
                    "agent-name-input",
                    max_length=80,
                ),
                "agent-name",
            ),
            _field(
                "Description",
                "description",
                _text_area(
                    PreviewState.form_description,
                    PreviewState.save_description,
                    "agent-description",
                    placeholder="What this agent is for (optional)",
                    max_length=500,
                    rows="2",
                ),
                "agent-description",
            ),
            _field("Runtime", "runtime", _runtime_select(), "agent-runtime"),
            _field("Provider key", "provider_credential_id", _provider_select(), "agent-provider"),
            _field("Model", "model", _model_field(), "agent-model"),
            _field(
                "System prompt",
                "system_prompt",
                _text_area(
                    PreviewState.form_system_prompt,
                    PreviewState.save_system_prompt,
                    "agent-system-prompt",
                    placeholder="You are a careful assistant for …",
                    rows="12",
                    min_height="220px",
                ),
                "agent-system-prompt",
            ),
            _field(
                "Kind",
                "kind",
                rx.segmented_control.root(
                    rx.segmented_control.item("Assistant", value="pet"),
                    rx.segmented_control.item("Task", value="cattle"),
                    value=PreviewState.kind,
                    on_change=PreviewState.set_kind,
                    width="100%",
                    data_testid="agent-kind",
                ),
                "agent-kind",
                rx.text(
                    cond_value(
                        PreviewState.kind == "pet",
                        "One long-lived sandbox shared by all its threads.",
                        "A fresh sandbox for every run.",
                    ),
                    size="1",
                    color_scheme="gray",
                ),
            ),
            _field(
                "Tools",
                "tools",
                rx.vstack(
                    *[_tool_row(tool) for tool in TOOL_DESCRIPTIONS], spacing="1", width="100%"
                ),
                "agent-tools",
                rx.cond(
                    PreviewState.can_ask,
                    rx.text(
                        "Ask: the agent waits for your approval in the chat.",
                        size="1",
                        color_scheme="gray",
                    ),
                    rx.fragment(),
                ),
            ),
            _provider_options(),
            _bindings(),
            spacing="4",
            width="100%",
        ),
        # Re-mount the uncontrolled fields with the saved values after each load.
        key=PreviewState.form_version,
        width="100%",
    )
