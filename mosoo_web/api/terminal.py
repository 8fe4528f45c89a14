"""`/api/terminal/{agent_id}`: the owner's terminal into a running Assistant's sandbox, as a
websocket (mosoo_core.runtime.terminal).

Authenticated by the console's session cookie on the handshake; a handshake from another
site's page is refused before it is accepted (SameSite=Lax does not separate the ports of one
host, so the cookie alone proves nothing; see `_origin.py`). Binary frames from the page are
keystrokes, text frames JSON controls (`{"type": "resize", "rows": R, "cols": C}`); binary
frames to the page are the terminal's output. The terminal closes, its processes ended, when
the page goes, when the shell exits, when a frame breaks the rules (the close reason says
which), and when the sign-in session ends: sign-out is announced on Redis, expiry is found by
a periodic check. Refusals close with a 44xx code whose reason is the service's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from mosoo_core import identity
from mosoo_core.db import session_scope
from mosoo_core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MosooError,
    NotFound,
    Unauthenticated,
)
from mosoo_core.logs import get_logger
from mosoo_core.origins import allowed_origins
from mosoo_core.runtime import terminal as terminals
from mosoo_core.settings import get_settings
from mosoo_web.api.cookies import session_token

log = get_logger(__name__)

router = APIRouter(prefix="/api/terminal")

MAX_INPUT_BYTES = 64 * 1024  # one binary frame: a paste of up to 64 KiB
MAX_CONTROL_BYTES = 1024  # one text (JSON) frame
SESSION_CHECK_SECONDS = (
    30.0  # how often an open terminal checks its sign-in session in the database
)
OUTPUT_QUEUE_CHUNKS = 16  # output read ahead of a slow page (then the shell waits)
AGENT_ID_LENGTH = 26
# Close codes: RFC 6455's own, and 4000 + the HTTP status a request would have got.
NORMAL, POLICY, TOO_BIG, INTERNAL = 1000, 1008, 1009, 1011
REFUSALS: tuple[tuple[type[MosooError], int], ...] = (
    (Unauthenticated, 4401),
    (Forbidden, 4403),
    (NotFound, 4404),
    (Conflict, 4409),
    (InvalidInput, 4400),
)
Ending = tuple[int | None, str]  # (close code, reason); code None: the page already left


def _reason(text: str) -> str:
    """A close frame's reason is at most 123 bytes of UTF-8."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "…"


def _from_this_site(websocket: WebSocket) -> bool:
    """Every `Origin` must be the console's own; none at all is not a browser page's."""
    allowed = allowed_origins(get_settings().public_url)
    return all(
        value.decode("latin-1") in allowed
        for name, value in websocket.scope["headers"]
        if name == b"origin"
    )


def _caller(token: str | None) -> tuple[str, str]:
    """(account id, sign-in session id) behind the cookie; Unauthenticated otherwise."""
    with session_scope() as db:
        account_id = identity.resolve_session(db, token)
        session_id = identity.session_id_for_token(db, token)
    if account_id is None or session_id is None:
        raise Unauthenticated("Sign in to the console to open the terminal.")
    return account_id, session_id


def _integer(value: str | None, default: int) -> object:
    if value is None:
        return default
    return int(value) if value.isdecimal() and len(value) <= 6 else value


def _open(
    token: str | None, agent_id: str, rows: object, cols: object
) -> tuple[terminals.Terminal, str]:
    """The terminal opened, and the sign-in session it lives within."""
    terminals.check_enabled()
    account_id, session_id = _caller(token)
    size = terminals.TerminalSize.checked(rows, cols)
    if not agent_id or len(agent_id) > AGENT_ID_LENGTH:
        raise NotFound("Agent not found.")
    return terminals.open_terminal(account_id, agent_id, size), session_id


def _ended(session_id: str) -> bool:
    with session_scope() as db:
        return bool(identity.ended_sessions(db, [session_id]))


@router.websocket("/{agent_id}")
async def terminal_socket(websocket: WebSocket, agent_id: str) -> None:
    """The terminal of the caller's Assistant `agent_id` (see the module docstring)."""
    if not _from_this_site(websocket):
        log.warning("terminal.origin_refused", agent_id=agent_id[:40])
        await websocket.close(code=POLICY)  # before accept: the handshake gets HTTP 403
        return
    await websocket.accept()
    params = websocket.query_params
    rows, cols = _integer(params.get("rows"), 24), _integer(params.get("cols"), 80)
    try:
        terminal, session_id = await asyncio.to_thread(
            _open, session_token(websocket), agent_id, rows, cols
        )
    except MosooError as refusal:
        code = next((code for kind, code in REFUSALS if isinstance(refusal, kind)), INTERNAL)
        await websocket.close(code=code, reason=_reason(refusal.message))
        return
    await _serve(websocket, terminal, session_id)


async def _serve(websocket: WebSocket, terminal: terminals.Terminal, session_id: str) -> None:
    loop = asyncio.get_running_loop()
    output: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=OUTPUT_QUEUE_CHUNKS)
    stop = threading.Event()
    reader = threading.Thread(
        target=_pump_output,
        args=(terminal, output, loop, stop),
        name=f"terminal-{terminal.id}",
        daemon=True,
    )
    reader.start()
    tasks = [
        asyncio.create_task(_send_output(websocket, output)),
        asyncio.create_task(_receive_input(websocket, terminal)),
        asyncio.create_task(_session_ended(session_id)),
        asyncio.create_task(_renew(terminal)),
    ]
    ending: Ending = (None, "The web server stopped.")
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        ending = next(iter(done)).result()
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        code, reason = ending
        # The Logs keep why it ended when the owner did not end it (page closed, shell exited).
        unasked = code not in (None, NORMAL) or reason == "The web server stopped."
        await asyncio.to_thread(terminal.close, reason if unasked else "")
        if code is not None and websocket.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                await websocket.close(code=code, reason=_reason(reason))


def _pump_output(
    terminal: terminals.Terminal,
    output: asyncio.Queue[bytes | None],
    loop: asyncio.AbstractEventLoop,
    stop: threading.Event,
) -> None:
    """The terminal's output into `output` until it ends (then None) or `stop` is set."""

    def put(item: bytes | None) -> bool:
        future = asyncio.run_coroutine_threadsafe(output.put(item), loop)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                future.result(timeout=0.5)
                return True
        future.cancel()
        return False

    try:
        while (chunk := terminal.read()) and put(chunk):
            pass
    except Exception as error:  # the loop went away: the terminal is being closed anyway
        log.warning("terminal.output_failed", terminal_id=terminal.id, error=type(error).__name__)
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        put(None)


async def _send_output(websocket: WebSocket, output: asyncio.Queue[bytes | None]) -> Ending:
    while (chunk := await output.get()) is not None:
        try:
            await websocket.send_bytes(chunk)
        except (WebSocketDisconnect, RuntimeError, OSError):
            return None, "The page was closed."
    return NORMAL, "The shell exited."


async def _receive_input(websocket: WebSocket, terminal: terminals.Terminal) -> Ending:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None, "The page was closed."
        data, text = message.get("bytes"), message.get("text")
        try:
            if data is not None:
                if len(data) > MAX_INPUT_BYTES:
                    return TOO_BIG, "Input frames are limited to 64 KiB."
                await asyncio.to_thread(terminal.write, data)
            elif text is not None:
                if len(text.encode()) > MAX_CONTROL_BYTES:
                    return TOO_BIG, "Control frames are limited to 1 KiB."
                await asyncio.to_thread(terminal.resize, _resize(text))
        except InvalidInput as refusal:
            return POLICY, refusal.message
        except Conflict:
            return NORMAL, "The shell exited."


def _resize(text: str) -> terminals.TerminalSize:
    """A control frame: only `{"type": "resize", "rows": R, "cols": C}` is one."""
    try:
        control = json.loads(text)
    except ValueError:
        raise InvalidInput("A text frame must be JSON: send keystrokes as binary.") from None
    if not isinstance(control, dict) or control.get("type") != "resize":
        raise InvalidInput('The only control frame is {"type": "resize", "rows", "cols"}.')
    return terminals.TerminalSize.checked(control.get("rows"), control.get("cols"))


async def _session_ended(session_id: str) -> Ending:
    """Returns once the sign-in session has ended: its sign-out announced, or found ended
    (expired, revoked unannounced) by the periodic check or on (re)subscribing."""
    ended = asyncio.Event()

    async def check() -> None:
        if await asyncio.to_thread(_ended, session_id):
            ended.set()

    async def listen() -> None:
        # Cancelled while it waits inside the generator, which closes its Redis client then.
        async for revoked_id in identity.revoked_sessions(on_subscribed=check):
            if revoked_id == session_id:
                ended.set()

    async def poll() -> None:
        while True:
            await asyncio.sleep(SESSION_CHECK_SECONDS)
            await check()

    watchers = [asyncio.create_task(listen()), asyncio.create_task(poll())]
    try:
        await ended.wait()
    finally:
        for watcher in watchers:
            watcher.cancel()
    return 4401, "The sign-in session ended."


async def _renew(terminal: terminals.Terminal) -> Ending:
    while True:
        await asyncio.sleep(terminals.RENEW_SECONDS)
        await asyncio.to_thread(terminal.renew)
