"""Reflex configuration; Mosoo's own knobs live in mosoo_core.settings (MOSOO_* variables)."""

from urllib.parse import urlsplit

import reflex as rx
from reflex.plugins.sitemap import SitemapPlugin

from mosoo_core.origins import allowed_origins
from mosoo_core.settings import get_settings

settings = get_settings()
# Behind a real domain the browser reaches the backend through the public URL; on a local
# machine Reflex rewrites "localhost" to whatever host name the page was opened with.
_public = urlsplit(settings.public_url)
_api_url = settings.public_url if _public.hostname not in ("localhost", "127.0.0.1", None) else None

config = rx.Config(
    app_name="mosoo_web",
    telemetry_enabled=False,
    show_built_with_reflex=False,
    **({"api_url": _api_url} if _api_url else {}),
    # python-socketio refuses a websocket handshake from any other page's Origin (pages of
    # another port are the same site, so the session cookie alone proves nothing); Reflex's
    # CORS middleware answers only these origins too.
    cors_allowed_origins=list(allowed_origins(settings.public_url)),
    frontend_port=settings.web_port,
    backend_port=settings.web_port,
    plugins=[
        rx.plugins.RadixThemesPlugin(
            theme=rx.theme(
                appearance="inherit", accent_color="iris", gray_color="slate", radius="medium"
            )
        )
    ],
    disable_plugins=[SitemapPlugin],
)
