"""Ending a browser session everywhere: sign-out, then an announcement on Redis.

The database is the truth. The console re-resolves the session cookie on every action, so
a revoked session can do nothing more whatever this module manages to tell anyone; the
announcement only adds promptness. Every web process listens (`revoked_sessions`) and sends
the tabs it serves for that session to /login at once, instead of at their next click.

`sign_out` is one call that commits, then publishes, for both front doors (the console's
Sign out and `POST /api/auth/logout`). Announcing before the commit would let a listener, or
a tab reloading on the message, still find the session alive; and one call is one place to
get that order right instead of two. So, unlike most services, it owns its unit of work.

Best effort: with Redis down, sign-out still succeeds (the failure is logged) and listeners
re-check what they hold when their subscription comes back (anything announced meanwhile
was lost); the per-action check protects in between. Pub/Sub channels ignore the Redis
database number, so the channel name carries it: two installations sharing one Redis
server on different databases do not hear each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

import redis
import redis.asyncio as aioredis
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.identity._secrets import token_digest
from mosoo_core.identity._sessions import revoke_session
from mosoo_core.logs import get_logger
from mosoo_core.settings import get_settings
from mosoo_core.tables.identity import AuthSession

log = get_logger(__name__)

PUBLISH_TIMEOUT_SECONDS = 2.0  # a sign-out waits at most this long for an unreachable Redis
RESUBSCRIBE_SECONDS = 5.0  # a listener whose Redis went away tries again this often
_IN_BATCH = 500  # ids per IN (...) query, well under SQLite's bound-parameter limit


def revoked_channel(redis_url: str | None = None) -> str:
    """The Pub/Sub channel of revoked session ids for this installation's Redis database."""
    return f"identity:sessions:revoked:{_database_number(redis_url or get_settings().redis_url)}"


def _database_number(url: str) -> int:
    """The database of a Redis URL: `?db=N`, else the path of a `redis(s)://host/N` URL, else 0."""
    parts = urlsplit(url)
    from_query = parse_qs(parts.query).get("db")
    if from_query and from_query[0].isdigit():
        return int(from_query[0])
    path = parts.path.strip("/")
    return int(path) if parts.scheme in ("redis", "rediss") and path.isdigit() else 0


def session_id_for_token(db: Session, token: str | None) -> str | None:
    """The id of the session row behind a cookie token, live or not; None when unknown. Not a
    check: `resolve_session` says whether the session may still act."""
    if not token or len(token) > 200:
        return None
    return db.exec(
        select(AuthSession.id).where(AuthSession.token_hash == token_digest(token))
    ).first()


def ended_sessions(
    db: Session,
    session_ids: Iterable[str],
    *,
    now: datetime | None = None,
    revoked_before: datetime | None = None,
) -> set[str]:
    """Which of `session_ids` can no longer be used: gone, expired or revoked (the rule of
    `resolve_session`, by id). With `revoked_before`, a revocation at or after that moment
    is not counted: a periodic sweep leaves fresh ones to their announcement."""
    now = now or utcnow()
    wanted = sorted(set(session_ids))
    alive: set[str] = set()
    for start in range(0, len(wanted), _IN_BATCH):
        batch = wanted[start : start + _IN_BATCH]
        rows = db.exec(
            select(AuthSession.id, AuthSession.expires_at, AuthSession.revoked_at).where(
                col(AuthSession.id).in_(batch)
            )
        ).all()
        for session_id, expires_at, revoked_at in rows:
            revoked = revoked_at is not None and (
                revoked_before is None or revoked_at < revoked_before
            )
            if expires_at > now and not revoked:
                alive.add(session_id)
    return set(wanted) - alive


def publish_session_revoked(session_id: str, *, redis_url: str | None = None) -> bool:
    """Announce a revoked session to every web process; False (logged) when Redis fails."""
    url = redis_url or get_settings().redis_url
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=PUBLISH_TIMEOUT_SECONDS,
            socket_connect_timeout=PUBLISH_TIMEOUT_SECONDS,
        )
        with client:
            client.publish(revoked_channel(url), session_id)
    except (redis.RedisError, OSError) as error:
        log.warning(
            "identity.session_revoked_publish_failed",
            session_id=session_id,
            error=type(error).__name__,
        )
        return False
    return True


def sign_out(token: str | None, *, now: datetime | None = None) -> bool:
    """Revoke the browser session behind `token`, commit, then announce it (best effort).
    Returns whether a live session was revoked; signing out twice announces once."""
    with session_scope() as db:
        session_id = session_id_for_token(db, token)
        revoked = revoke_session(db, token, now=now)
    if revoked and session_id:
        publish_session_revoked(session_id)
    if revoked:
        log.info("identity.signed_out", session_id=session_id)
    return revoked


async def revoked_sessions(
    *,
    redis_url: str | None = None,
    on_subscribed: Callable[[], Awaitable[None]] | None = None,
    resubscribe_seconds: float = RESUBSCRIBE_SECONDS,
) -> AsyncIterator[str]:
    """Every revoked session id announced from now on, for as long as the caller iterates.

    When Redis fails the error is logged and the subscription is retried every
    `resubscribe_seconds`. `on_subscribed` runs each time the subscription is confirmed
    (the first time too): whatever was announced while there was none is lost, so that is
    when a caller re-checks the sessions it holds against the database."""
    url = redis_url or get_settings().redis_url
    channel = revoked_channel(url)
    failing = False  # warn once per outage, not at every retry
    while True:
        client = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=5,
            socket_keepalive=True,  # a silently dropped connection is noticed (the sweep covers meanwhile)
            # Named so an operator (or a test) can tell which process a subscriber belongs to.
            client_name=f"mosoo-revocations-{os.getpid()}",
        )
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                async for message in pubsub.listen():
                    if message["type"] == "subscribe":
                        failing = False
                        log.info("identity.revocations_subscribed", channel=channel)
                        if on_subscribed is not None:
                            await on_subscribed()
                    elif message["type"] == "message":
                        data = message["data"]
                        yield data.decode() if isinstance(data, bytes) else str(data)
        except (redis.RedisError, OSError) as error:
            if not failing:
                log.warning(
                    "identity.revocations_unavailable", channel=channel, error=type(error).__name__
                )
            failing = True
        finally:
            with contextlib.suppress(redis.RedisError, OSError):
                await client.aclose()
        await asyncio.sleep(resubscribe_seconds)
