"""The CLI's side of Mosoo's HTTP API: saved credentials, the device-flow sign-in, the
public API v1 calls and a resumable Server-Sent Events reader.

Only httpx and the standard library: the CLI talks to a Mosoo server, never to its database.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CREDENTIALS_FILE = "credentials.json"
USER_AGENT = "mosoo-cli"
# A stream that drops is resumed; this many failed reconnects in a row give up.
MAX_RECONNECT_ATTEMPTS = 8


class ApiError(Exception):
    """A Mosoo error answer (`{"error": {"code", "message"}}`) or an unreachable server."""

    def __init__(
        self, code: str, message: str, status: int = 0, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.body = body or {}


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str


def config_dir() -> Path:
    configured = os.environ.get("MOSOO_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mosoo"


def credentials_path() -> Path:
    return config_dir() / CREDENTIALS_FILE


def load_credentials() -> Credentials | None:
    path = credentials_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ApiError(
            "bad_credentials", f"Cannot read {path}: {error}. Run `mosoo login` again."
        ) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("url"), str)
        or not isinstance(data.get("token"), str)
    ):
        raise ApiError(
            "bad_credentials", f"{path} is not a Mosoo credentials file. Run `mosoo login` again."
        )
    return Credentials(url=data["url"], token=data["token"])


def save_credentials(credentials: Credentials) -> Path:
    """Write the token readable by this user only (0600), replacing any earlier file atomically."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # The mode is set at creation, so the token is never readable by others, not even briefly.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"url": credentials.url, "token": credentials.token}, handle)
            handle.write("\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    return path


def delete_credentials() -> bool:
    try:
        credentials_path().unlink()
    except FileNotFoundError:
        return False
    return True


def normalize_url(raw: str) -> str:
    url = (raw or "").strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url if url else url
    parsed = httpx.URL(url) if url else None
    if parsed is None or not parsed.host:
        raise ApiError(
            "invalid_url", f"Not a server URL: {raw!r}. Use e.g. https://mosoo.example.com"
        )
    return url


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return ApiError(
            error["code"], str(error.get("message") or error["code"]), response.status_code, error
        )
    return ApiError(
        "http_error",
        f"The server answered {response.status_code} {response.reason_phrase}.",
        response.status_code,
    )


@dataclass(frozen=True)
class SseEvent:
    id: str | None
    event: str
    data: str


def parse_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Server-Sent Events per the HTML spec: `id`, `event`, multi-line `data`, `:` comments."""
    event_id: str | None = None
    event_type = ""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield SseEvent(event_id, event_type or "message", "\n".join(data))
            event_type, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
        elif name == "id" and "\x00" not in value:
            event_id = value


class MosooClient:
    """One server, optionally one access token."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.url = normalize_url(url)
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MosooClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ApiError("unreachable", f"Cannot reach {self.url}: {error}") from None
        if response.status_code >= 400:
            raise _error_from(response)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                "bad_response", f"{self.url} did not answer with JSON. Is it a Mosoo server?"
            ) from None

    # -- device-flow sign-in ---------------------------------------------------------------

    def start_device_login(self, client_name: str) -> dict[str, Any]:
        answer = self._request("POST", "/api/auth/cli/start", json={"client_name": client_name})
        if not isinstance(answer, dict) or "device_code" not in answer:
            raise ApiError(
                "bad_response", f"{self.url} did not start a sign-in. Is it a Mosoo server?"
            )
        return answer

    def poll_device_token(self, device_code: str) -> dict[str, Any]:
        """The token answer, or ApiError whose code is the RFC 8628 reason."""
        answer = self._request("POST", "/api/auth/cli/token", json={"device_code": device_code})
        if not isinstance(answer, dict) or "access_token" not in answer:
            raise ApiError("bad_response", "The server's token answer has no access token.")
        return answer

    # -- public API v1 ---------------------------------------------------------------------

    @staticmethod
    def _items(answer: Any, key: str) -> list[dict[str, Any]]:
        items = answer.get(key, answer.get("data")) if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise ApiError("bad_response", f"The server's answer has no `{key}` list.")
        return [item for item in items if isinstance(item, dict)]

    def list_agents(self) -> list[dict[str, Any]]:
        return self._items(self._request("GET", "/api/v1/agents"), "agents")

    def list_threads(self, agent_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
        return self._items(
            self._request("GET", f"/api/v1/agents/{agent_id}/threads", params={"limit": limit}),
            "threads",
        )

    def create_thread(self, agent_id: str, message: str) -> dict[str, Any]:
        answer = self._request(
            "POST", f"/api/v1/agents/{agent_id}/threads", json={"message": message}
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("thread"), dict):
            raise ApiError("bad_response", "The server's answer has no thread.")
        return answer

    def stream_events(
        self,
        thread_id: str,
        *,
        last_event_id: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Iterator[dict[str, Any]]:
        """The thread's events, forever (the caller stops iterating). A dropped connection is
        resumed with `Last-Event-ID`, so nothing is missed or repeated."""
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last_event_id is not None:
                headers["Last-Event-ID"] = last_event_id
            try:
                with self._http.stream(
                    "GET",
                    f"/api/v1/threads/{thread_id}/events/stream",
                    headers=headers,
                    timeout=httpx.Timeout(30.0, read=120.0),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise _error_from(response)
                    failures = 0
                    for sse in parse_sse(response.iter_lines()):
                        if sse.id is not None:
                            last_event_id = sse.id
                        try:
                            event = json.loads(sse.data)
                        except ValueError:
                            continue
                        if isinstance(event, dict):
                            yield event
            except httpx.HTTPError as error:
                failures += 1
                if failures > MAX_RECONNECT_ATTEMPTS:
                    raise ApiError(
                        "unreachable", f"Lost the event stream from {self.url}: {error}"
                    ) from None
            except ApiError as error:
                # 5xx while a server restarts is worth waiting for; 4xx will not change.
                failures += 1
                if error.status < 500 or failures > MAX_RECONNECT_ATTEMPTS:
                    raise
            # The server ended the stream or the connection dropped: resume where we were.
            sleep(min(0.5 * 2 ** max(failures - 1, 0), 10.0) if failures else 0.2)


def device_login(
    client: MosooClient,
    client_name: str,
    *,
    on_code: Callable[[dict[str, Any]], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run the device flow: start, show the code (`on_code`), poll at the server's pace until
    approved. Returns the token answer; ApiError with `access_denied`, `expired_token` or
    `invalid_grant` when it will not be approved."""
    started = client.start_device_login(client_name)
    on_code(started)
    interval = float(started.get("interval") or 5)
    deadline = clock() + float(started.get("expires_in") or 600)
    while True:
        sleep(interval)
        try:
            return client.poll_device_token(str(started["device_code"]))
        except ApiError as error:
            if error.code == "authorization_pending":
                pass
            elif error.code == "slow_down":
                # RFC 8628 3.5: add 5 seconds; the server also says the interval it expects.
                interval = max(interval + 5, float(error.body.get("interval") or 0))
            elif (error.code == "unreachable" or error.status >= 500) and clock() < deadline:
                pass  # the server may be restarting: keep trying until the code would expire
            else:
                raise
        if clock() >= deadline:
            raise ApiError(
                "expired_token", "The code expired before it was approved. Run `mosoo login` again."
            )
