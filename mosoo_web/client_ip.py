"""The client address that per-IP limits count: the TCP peer, unless that peer is one of
`MOSOO_TRUSTED_PROXIES`, whose `X-Forwarded-For` is then believed.

Behind the HTTPS proxy the README recommends, every request's peer is the proxy: counting
peers would make each per-IP limit one limit for the whole installation, which a single
client could use up for everybody. The header is walked from the right, skipping trusted
proxies, and the first other address is the client: what a client writes at the left of
the header itself is never believed."""

from __future__ import annotations

import ipaddress
from typing import Any

from fastapi import Request

from mosoo_core.settings import get_settings


def _address(raw: str) -> str | None:
    try:
        return str(ipaddress.ip_address(raw.strip().strip("[]")))
    except ValueError:
        return None


def client_address(peer: str, forwarded_for: str = "") -> str:
    """The client of a request that arrived from `peer` with this `X-Forwarded-For`."""
    trusted = get_settings().trusted_proxy_addresses
    if not trusted or _address(peer) not in trusted:
        return peer
    for hop in reversed(forwarded_for.split(",")):
        address = _address(hop)
        if address is None:
            break  # a garbled hop: stop at the last proxy we trust
        if address not in trusted:
            return address
    return peer


def request_client_ip(request: Request) -> str:
    peer = request.client.host if request.client else ""
    return client_address(peer, request.headers.get("x-forwarded-for", ""))


def tab_client_ip(router: Any) -> str:
    """The same for a console tab (a Reflex state's `router`: its websocket's peer and headers)."""
    return client_address(
        router.session.client_ip, router.headers.raw_headers.get("x-forwarded-for", "")
    )
