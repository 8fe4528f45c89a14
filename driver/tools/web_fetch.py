"""`web_fetch`: GET a URL through the sandbox's HTTP(S) proxy and return it as readable text.

A sandbox reaches the network only through Mosoo's egress proxy: `HTTP_PROXY` / `HTTPS_PROXY`
point at an in-sandbox loopback listener that tunnels to it, and it enforces the environment's
network policy (allowed hosts, no private addresses). Without them the sandbox has no network,
and the tool says so instead of trying. The environment is the one the `bash` tool's commands
get (the driver's, plus the execution spec's), so `web_fetch` reaches what `curl` would.

http:// URLs go to the proxy as absolute-URI requests (httpx's own proxy transport); https://
URLs through a CONNECT tunnel that `_tunnel._ConnectTunnel` opens itself, because httpcore's drops the
headers and body of a refused CONNECT, and those say why (`X-Mosoo-Egress: refused`,
`egress refused: not_allowed (host:443)`). TLS is verified against `SSL_CERT_FILE` /
`SSL_CERT_DIR` when set, else certifi's bundle (what httpx itself does). Redirects are followed
one by one, each through the proxy again, so every hop is checked against the policy.

HTML becomes Markdown (BeautifulSoup's pure-Python `html.parser`, then markdownify); text/*,
JSON, XML and the like come back as they are; anything else is refused by its content type.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from driver.tools.base import (
    Tool,
    ToolContext,
    ToolInputError,
    ToolResult,
    optional_int,
    require_str,
)
from driver.tools.bash import command_environment

# httpx, BeautifulSoup and markdownify are imported by the first fetch: most runs never fetch,
# and an idle driver carries none of them.
if TYPE_CHECKING:
    import httpx

DEFAULT_MAX_CHARS = 20_000
MAX_CHARS_LIMIT = 100_000
MAX_DOWNLOAD_BYTES = 5 * 1024 * 1024
TOTAL_SECONDS = 30.0
CONNECT_SECONDS = 10.0
MAX_REDIRECTS = 5
ERROR_EXCERPT_CHARS = 500
ERROR_READ_BYTES = 64 * 1024  # of a 4xx/5xx body, for its excerpt
USER_AGENT = "Mosoo-web_fetch/1.0"
ACCEPT = "text/html,application/xhtml+xml,text/*;q=0.9,application/json;q=0.9,*/*;q=0.5"

NO_NETWORK = 'This sandbox has no network access (environment network policy "none").'
# Set by the driver from the run's network policy: under `full` the sandbox has its own
# route out, and there is no proxy to go through.
NETWORK_POLICY_ENV = "MOSOO_NETWORK_POLICY"
POLICY_HINT = "Allowed hosts are set on the Agent's environment."

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Non-text/* types that are text all the same (besides any `+json` / `+xml` type).
_TEXT_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/graphql",
    }
)
# Elements that never hold readable text.
_DROPPED_ELEMENTS = (
    "head",
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "canvas",
    "iframe",
    "object",
    "embed",
)
_CHARSET = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)
# Comments, elements without readable text, tags, and text: for `_html_prefix`.
_HTML_TOKENS = re.compile(
    r"<!--.*?-->|<(script|style|noscript|template|svg)\b.*?</\1\s*>|<[^>]*>|[^<]+",
    re.DOTALL | re.IGNORECASE,
)
_WHITESPACE = re.compile(r"\s+")
_REFUSAL = re.compile(r"egress refused:\s*([\w.-]+)\s*\(([^)\s]+)\)")


# --- the environment: proxies and TLS -----------------------------------------------------


def proxy_for(scheme: str, env: dict[str, str]) -> str | None:
    """The proxy URL for `scheme` URLs: its own variable (lowercase first, as Python's
    urllib does), then ALL_PROXY, then the other scheme's (the sandbox points both at the
    same listener). None: no proxy, so no network."""
    other = "https" if scheme == "http" else "http"
    for name in (f"{scheme}_proxy", "all_proxy", f"{other}_proxy"):
        value = (env.get(name) or env.get(name.upper()) or "").strip()
        if value:
            return value if "://" in value else f"http://{value}"
    return None


def tls_context(env: dict[str, str]) -> ssl.SSLContext:
    """Verified TLS: SSL_CERT_FILE / SSL_CERT_DIR when set (as httpx's trust_env), else certifi."""
    if env.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
    if env.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=env["SSL_CERT_DIR"])
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


# --- responses ----------------------------------------------------------------------------


@dataclass
class _Body:
    data: bytes
    cut: bool  # the download stopped at the size limit


@dataclass
class _Fetch:
    url: str
    hops: list[str] = field(default_factory=list)  # every URL requested, in order


def _media_type(content_type: str) -> tuple[str, str | None]:
    mime = content_type.split(";", 1)[0].strip().lower()
    match = _CHARSET.search(content_type)
    return mime, match.group(1) if match else None


def _kind(mime: str) -> str | None:
    """ "html", "text", "" (no type given: sniff it), or None (binary: refused)."""
    if not mime:
        return ""
    if mime in _HTML_TYPES:
        return "html"
    if mime.startswith("text/") or mime in _TEXT_APPLICATION_TYPES:
        return "text"
    if mime.endswith(("+json", "+xml")):
        return "text"
    return None


def _sniff(data: bytes) -> str | None:
    head = data[:1024]
    if b"\x00" in head:
        return None
    start = head.lstrip()[:200].lower()
    if start.startswith((b"<!doctype html", b"<html")) or b"<html" in start:
        return "html"
    return "text"


def _decode(data: bytes, charset: str | None) -> str:
    """The declared charset, else UTF-8; strictly first, then with replacement characters
    (a download cut at the size limit may end inside a character)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data, charset = data[3:], "utf-8"
    candidates = [c for c in (charset, "utf-8") if c]
    for errors in ("strict", "replace"):
        for encoding in candidates:
            try:
                return data.decode(encoding, errors=errors)
            except (LookupError, UnicodeDecodeError):
                continue
    return data.decode("utf-8", errors="replace")


def _html_charset(data: bytes) -> str | None:
    match = _META_CHARSET.search(data[:4096])
    return match.group(1).decode("ascii", errors="ignore") if match else None


def _html_prefix(html: str, budget: int) -> tuple[str, bool]:
    """The start of a page holding about `budget` characters of text, and whether the page
    goes on: what is past it would be truncated anyway, and parsing and converting a 5 MiB
    page whole takes many seconds. A rough scan of the source, before any parsing."""
    total = 0
    for match in _HTML_TOKENS.finditer(html):
        piece = match.group(0)
        if piece.startswith("<"):
            continue
        total += len(_WHITESPACE.sub(" ", piece).strip())
        if total > budget:
            return html[: match.end()], True
    return html, False


def html_to_markdown(html: str, base_url: str, max_chars: int) -> tuple[str, str | None, bool]:
    """Markdown of a page's readable content with links made absolute, its title, and whether
    the page went on past what was converted (about `max_chars` characters of text)."""
    # Markdown is a little longer than the text it holds: the cut leaves some to spare.
    html, cut = _html_prefix(html, max_chars + max_chars // 4 + 1000)
    from bs4 import BeautifulSoup
    from markdownify import ATX, MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    title = " ".join(soup.title.get_text(" ").split()) if soup.title else ""
    base = soup.find("base", href=True)
    if base is not None:
        base_url = urljoin(base_url, str(base.get("href")))
    for element in soup(_DROPPED_ELEMENTS):
        element.decompose()
    for link in soup.find_all("a", href=True):
        href = str(link.get("href")).strip()
        if href.lower().startswith("javascript:"):
            link.unwrap()
        else:
            link["href"] = urljoin(base_url, href)
    for image in soup.find_all("img"):
        src = str(image.get("src") or "").strip()
        if not src or src.lower().startswith("data:"):
            image.replace_with(str(image.get("alt") or ""))
        else:
            image["src"] = urljoin(base_url, src)
    converter = MarkdownConverter(
        heading_style=ATX, bullets="-", escape_asterisks=False, escape_underscores=False
    )
    markdown = converter.convert_soup(soup)
    markdown = re.sub(r"[ \t]+\n", "\n", markdown)
    markdown = re.sub(r"\n{3,}", "\n\n", markdown).strip()
    return markdown, title or None, cut


def _status_line(response: httpx.Response) -> str:
    return f"{response.http_version} {response.status_code} {response.reason_phrase}".rstrip()


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MiB"
    if count >= 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count} bytes"


def _excerpt(text: str, limit: int = ERROR_EXCERPT_CHARS) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[:limit] + " …"


def refusal_message(target: str, body: str) -> str:
    """The model-facing error for an egress-policy refusal, from the proxy's answer body
    (`egress refused: <reason> (<host:port>)`)."""
    match = _REFUSAL.search(body)
    if match:
        reason, target = match.group(1), match.group(2)
    else:
        reason = _excerpt(body, 200) or "refused"
    return f"The network policy refused {target}: {reason}. {POLICY_HINT}"


def _is_refusal(headers: httpx.Headers | dict[str, str]) -> bool:
    return str(headers.get("x-mosoo-egress", "")).strip().lower() == "refused"


def _tls_failure(error: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


# --- the tool -----------------------------------------------------------------------------


class WebFetchTool(Tool):
    name = "web_fetch"
    description = (
        "Fetch a URL with an HTTP GET and return its content as readable text: HTML pages as "
        "Markdown (links made absolute), plain text, JSON and XML as they are; images and other "
        "binary content are refused. The output starts with the final URL and the status line. "
        "Requests go through the sandbox's network policy, so only hosts allowed on the Agent's "
        f"environment can be reached. Follows up to {MAX_REDIRECTS} redirects, reads at most "
        f"{MAX_DOWNLOAD_BYTES // (1024 * 1024)} MiB and gives up after {TOTAL_SECONDS:g} s. "
        f"Returns at most `max_chars` characters (default {DEFAULT_MAX_CHARS}, "
        f"max {MAX_CHARS_LIMIT})."
    )
    parameters = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http:// or https:// URL to fetch."},
            "max_chars": {
                "type": "integer",
                "description": (
                    f"Return at most this many characters of content (default "
                    f"{DEFAULT_MAX_CHARS}, at most {MAX_CHARS_LIMIT})."
                ),
            },
        },
        "required": ["url"],
    }
    # Room for max_chars of content plus the header lines (each clipped) and the notes.
    max_output_chars = MAX_CHARS_LIMIT + 6_000

    def __init__(
        self,
        total_timeout: float = TOTAL_SECONDS,
        connect_timeout: float = CONNECT_SECONDS,
        max_bytes: int = MAX_DOWNLOAD_BYTES,
    ) -> None:
        self.total_timeout = total_timeout
        self.connect_timeout = connect_timeout
        self.max_bytes = max_bytes

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        import httpx

        from driver.tools._tunnel import ProxyAnswer, ProxyUnreachable

        url = _check_url(require_str(arguments, "url").strip())
        max_chars = min(
            optional_int(arguments, "max_chars", minimum=1) or DEFAULT_MAX_CHARS, MAX_CHARS_LIMIT
        )
        env = command_environment(context.environment)
        direct = env.get(NETWORK_POLICY_ENV) == "full"
        proxies = {scheme: proxy_for(scheme, env) for scheme in ("http", "https")}
        if direct:
            proxies = {"http": None, "https": None}
        elif proxies[urlsplit(url).scheme.lower()] is None:
            return ToolResult(NO_NETWORK, is_error=True)
        for proxy in proxies.values():
            if proxy is not None and not _is_http_proxy(proxy):
                return ToolResult(
                    "The sandbox's proxy setting (HTTP_PROXY / HTTPS_PROXY) is not an "
                    "http://host:port URL, so web_fetch cannot use it.",
                    is_error=True,
                )
        try:
            tls = tls_context(env)
        except (OSError, ssl.SSLError) as error:
            return ToolResult(
                f"The trusted certificates (SSL_CERT_FILE / SSL_CERT_DIR) could not be loaded: "
                f"{error}",
                is_error=True,
            )
        fetch = _Fetch(url)
        try:
            async with asyncio.timeout(self.total_timeout):
                return await self._fetch(fetch, max_chars, proxies, tls, direct=direct)
        except TimeoutError:
            return ToolResult(
                f"Fetching {fetch.url} timed out after {self.total_timeout:g} s.", is_error=True
            )
        except ProxyUnreachable as error:
            return _proxy_unreachable(error.proxy, error.error)
        except ProxyAnswer as error:
            if _is_refusal(error.headers):
                return ToolResult(refusal_message(error.target, error.body), is_error=True)
            detail = f": {_excerpt(error.body, 300)}" if error.body.strip() else ""
            return ToolResult(
                f"The proxy could not open a connection to {error.target}: "
                f"{error.status} {error.reason}{detail}".rstrip(),
                is_error=True,
            )
        except httpx.HTTPError as error:
            return self._http_error(fetch, proxies, error)

    async def _fetch(
        self,
        fetch: _Fetch,
        max_chars: int,
        proxies: dict[str, str | None],
        tls: ssl.SSLContext,
        *,
        direct: bool = False,
    ) -> ToolResult:
        import httpx

        from driver.tools._tunnel import TunnelTransport

        mounts: dict[str, httpx.AsyncBaseTransport] = {}
        if proxies["http"]:
            mounts["http://"] = httpx.AsyncHTTPTransport(
                proxy=proxies["http"], verify=tls, trust_env=False
            )
        if proxies["https"]:
            mounts["https://"] = TunnelTransport(httpx.URL(proxies["https"]), tls)
        async with httpx.AsyncClient(
            mounts=mounts,
            trust_env=False,
            verify=tls,
            follow_redirects=False,
            timeout=httpx.Timeout(self.total_timeout, connect=self.connect_timeout),
            headers={"User-Agent": USER_AGENT, "Accept": ACCEPT},
        ) as client:
            while True:
                fetch.hops.append(fetch.url)
                # Checked per hop: a redirect may change the scheme.
                if not direct and proxies[urlsplit(fetch.url).scheme.lower()] is None:
                    return ToolResult(NO_NETWORK, is_error=True)
                async with client.stream("GET", fetch.url) as response:
                    if response.has_redirect_location:
                        location = response.headers["location"]
                        if len(fetch.hops) > MAX_REDIRECTS:
                            return ToolResult(
                                f"Stopped after {MAX_REDIRECTS} redirects: {fetch.url} redirects "
                                f"again, to {location}. The chain was: {' -> '.join(fetch.hops)}.",
                                is_error=True,
                            )
                        target = urljoin(str(response.url), location)
                        if urlsplit(target).scheme.lower() not in ("http", "https"):
                            return ToolResult(
                                f"{fetch.url} redirects to {target}, which is not an http(s) "
                                "URL; not followed.",
                                is_error=True,
                            )
                        fetch.url = target
                        continue
                    return await self._answer(fetch, response, max_chars)

    async def _answer(self, fetch: _Fetch, response: httpx.Response, max_chars: int) -> ToolResult:
        mime, charset = _media_type(response.headers.get("content-type", ""))
        kind = _kind(mime)
        failed = response.status_code >= 400
        if failed and _is_refusal(response.headers):
            from driver.tools._tunnel import CONNECT_BODY_LIMIT, authority

            body = await self._read(response, limit=CONNECT_BODY_LIMIT)
            target = authority(response.url.host, response.url.port or _default_port(fetch.url))
            return ToolResult(refusal_message(target, _decode(body.data, charset)), is_error=True)
        header = [f"URL: {_clip(str(response.url), 2000)}", _status_line(response)]
        if mime:
            header.append(f"Content-Type: {_clip(response.headers['content-type'], 200)}")
        if len(fetch.hops) > 1:
            chain = " -> ".join(_clip(hop, 300) for hop in fetch.hops[:-1])
            header.append(f"Redirected from: {chain}")
        if kind is None:
            length = response.headers.get("content-length", "")
            size = f" ({_size(int(length))})" if length.isdigit() else ""
            if failed:
                return ToolResult("\n".join(header) + f"\n\n[{mime} body{size} not shown]", True)
            return ToolResult(
                f"{response.url} is {mime} content{size}, which web_fetch does not read: it "
                "returns HTML, text and JSON only.",
                is_error=True,
            )
        body = await self._read(response, limit=ERROR_READ_BYTES if failed else None)
        if kind == "":
            kind = _sniff(body.data)
            if kind is None:
                return ToolResult(
                    f"{response.url} is binary content (no Content-Type given), which web_fetch "
                    "does not read: it returns HTML, text and JSON only.",
                    is_error=True,
                )
        if kind == "html":
            html = _decode(body.data, charset or _html_charset(body.data))
            text, title, page_goes_on = await asyncio.to_thread(
                html_to_markdown, html, str(response.url), max_chars
            )
            if title:
                header.append(f"Title: {_clip(title, 300)}")
        else:
            text, page_goes_on = _decode(body.data, charset), False
        if failed:
            excerpt = _excerpt(text) or "(empty body)"
            return ToolResult("\n".join(header) + f"\n\n{excerpt}", is_error=True)
        notes = []
        if body.cut:
            notes.append(
                f"[download stopped at {_size(self.max_bytes)}: the rest of the response was "
                "not read]"
            )
        if len(text) > max_chars or page_goes_on:
            of = "" if page_goes_on else f" of {len(text)}"
            more = (
                f"; call again with a larger max_chars (at most {MAX_CHARS_LIMIT}) to see more"
                if max_chars < MAX_CHARS_LIMIT
                else ""
            )
            notes.append(f"[truncated at {max_chars} characters{of}{more}]")
            text = text[:max_chars]
        content = text if text.strip() else "(empty body)"
        parts = ["\n".join(header), content, *notes]
        return ToolResult("\n\n".join(parts))

    async def _read(self, response: httpx.Response, limit: int | None = None) -> _Body:
        """The (decompressed) body, stopping at `limit` or the size limit."""
        cap = self.max_bytes if limit is None else min(limit, self.max_bytes)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                return _Body(b"".join(chunks)[:cap], cut=True)
        return _Body(b"".join(chunks), cut=False)

    def _http_error(
        self, fetch: _Fetch, proxies: dict[str, str | None], error: httpx.HTTPError
    ) -> ToolResult:
        import httpx

        parts = urlsplit(fetch.url)
        host = parts.hostname or fetch.url
        if isinstance(error, httpx.ConnectTimeout):
            message = f"Could not connect to {host} within {self.connect_timeout:g} s."
        elif isinstance(error, httpx.TimeoutException):
            message = f"Fetching {fetch.url} timed out after {self.total_timeout:g} s."
        elif isinstance(error, httpx.ConnectError) and (tls := _tls_failure(error)) is not None:
            message = f"The TLS connection to {host} failed: {tls.reason or tls}."
        elif isinstance(error, httpx.ConnectError) and parts.scheme == "http":
            # For http:// the only connection we open is the one to the proxy.
            return _proxy_unreachable(str(proxies["http"]), error)
        elif isinstance(error, httpx.ProtocolError | httpx.ProxyError):
            message = f"{host} sent an invalid HTTP response: {error}"
        elif isinstance(error, httpx.TransportError):
            message = f"The connection to {host} failed: {error or type(error).__name__}"
        else:
            message = f"Fetching {fetch.url} failed: {error or type(error).__name__}"
        return ToolResult(message, is_error=True)


def _check_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise ToolInputError(f"`url` is not a valid URL: {error}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        shown = f"{scheme}: URLs" if scheme else "URLs without a scheme"
        raise ToolInputError(
            f"only http:// and https:// URLs can be fetched, not {shown} (got {url[:200]!r})"
        )
    if not parts.hostname:
        raise ToolInputError(f"`url` has no host: {url[:200]!r}")
    import httpx

    try:
        httpx.URL(url)
    except httpx.InvalidURL as error:
        raise ToolInputError(f"`url` is not a valid URL: {error}") from None
    return url


def _is_http_proxy(proxy: str) -> bool:
    import httpx

    try:
        parsed = httpx.URL(proxy)
    except httpx.InvalidURL:
        return False
    return parsed.scheme == "http" and bool(parsed.host)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _default_port(url: str) -> int:
    return 443 if urlsplit(url).scheme.lower() == "https" else 80


def _proxy_unreachable(proxy: str, error: BaseException) -> ToolResult:
    import httpx

    from driver.tools._tunnel import authority

    try:
        parsed = httpx.URL(proxy)
        shown = f"{parsed.scheme}://{authority(parsed.host, parsed.port or 80)}"
    except httpx.InvalidURL:
        shown = "(an invalid proxy URL)"
    return ToolResult(
        f"Could not reach the sandbox's network proxy at {shown}: {error or type(error).__name__}.",
        is_error=True,
    )
