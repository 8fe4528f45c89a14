"""Reflex configuration; Mosoo's own knobs live in mosoo_core.settings (MOSOO_* variables)."""

import reflex as rx
from reflex.plugins.sitemap import SitemapPlugin

from mosoo_core.settings import get_settings

settings = get_settings()

config = rx.Config(
    app_name="mosoo_web",
    telemetry_enabled=False,
    show_built_with_reflex=False,
    frontend_port=settings.web_port,
    backend_port=settings.web_port,
    plugins=[
        rx.plugins.RadixThemesPlugin(
            theme=rx.theme(appearance="inherit", accent_color="iris", gray_color="slate", radius="medium")
        )
    ],
    disable_plugins=[SitemapPlugin],
)
