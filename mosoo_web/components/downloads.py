"""Links to a file's content through the console's file endpoint (`/api/files/...`)."""

from __future__ import annotations

import reflex as rx


def download_link(
    child: rx.Component, file_id: rx.Var[str] | str, label: rx.Var[str] | str, test_id: str
) -> rx.Component:
    """A link the browser follows itself: Reflex renders anchors as router links, which would
    navigate inside the app instead of fetching the API (`reloadDocument` lets it through)."""
    return rx.el.a(
        child,
        href=f"/api/files/{file_id}/content?download=1",
        download="",
        custom_attrs={"reloadDocument": True},
        aria_label=label,
        style={"color": "inherit", "display": "inline-flex", "align_items": "center"},
        data_testid=test_id,
    )
