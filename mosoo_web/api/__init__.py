"""The HTTP API served inside the web process: `/api/auth`, `/api/health` (and later `/api/v1`)."""

from __future__ import annotations

from fastapi import FastAPI

from mosoo_web.api import auth, google, health
from mosoo_web.api.errors import install_error_handlers


def build_api() -> FastAPI:
    api = FastAPI(title="Mosoo", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(api)
    api.include_router(health.router)
    api.include_router(auth.router)
    google.install(api)
    return api
