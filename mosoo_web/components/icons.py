"""An icon on a tinted tile: the brand mark, an Agent's avatar, an empty chat's picture."""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex_base.constants.colors import ColorType


def icon_tile(
    icon: str,
    size: int,
    padding: str,
    *,
    color: ColorType = "accent",
    radius: str = "999px",
    solid: bool = False,
    **props: Any,
) -> rx.Component:
    """`icon` on a soft tile of `color` (`solid`: a white icon on the full colour)."""
    return rx.box(
        rx.icon(icon, size=size, color="white" if solid else rx.color(color, 11)),
        background=rx.color(color, 9 if solid else 3),
        border_radius=radius,
        padding=padding,
        display="flex",
        **props,
    )
