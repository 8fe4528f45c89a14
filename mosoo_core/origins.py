"""The browser origins the console trusts: MOSOO_PUBLIC_URL's, plus its other loopback
spellings on a local machine. One list for the console's websocket and the HTTP checks."""

from __future__ import annotations

from urllib.parse import urlsplit

# How an `Origin` header spells each loopback host (IPv6 in brackets, RFC 6454).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed_origins(public_url: str) -> tuple[str, ...]:
    """The `scheme://host[:port]` values a browser sends as `Origin` from the console's pages.

    Exactly the public URL's origin; on a loopback host also the other loopback names with the
    same scheme and port. Never empty (an empty list would switch python-engineio's check off):
    a public URL without an http(s) scheme and a host is a configuration error.
    """
    parts = urlsplit(public_url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(
            f"MOSOO_PUBLIC_URL must be an absolute http:// or https:// URL, not {public_url!r}."
        )
    port = parts.port  # ValueError on a port that is not a number in range
    # Browsers leave the scheme's default port out of `Origin`.
    suffix = "" if port in (None, _DEFAULT_PORTS[scheme]) else f":{port}"
    host = parts.hostname  # lowercased, IPv6 brackets removed
    host = f"[{host}]" if ":" in host else host
    hosts = (
        [host, *(alias for alias in LOOPBACK_HOSTS if alias != host)]
        if host in LOOPBACK_HOSTS
        else [host]
    )
    return tuple(f"{scheme}://{name}{suffix}" for name in hosts)
