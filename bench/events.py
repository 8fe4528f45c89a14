"""Events through one control process: throughput and driver-to-viewer latency.

Starts a real `mosoo control` (SQLite in a temp dir, Redis db 10), plays C drivers over
the Unix socket (hello, then event batches waiting for each ack, as the driver does) and C
viewers reading the threads' Redis streams, and prints events/second and the latency from
a driver sending an event to a viewer receiving it.

    .venv/bin/python bench/events.py                 # C = 1 and 50
    .venv/bin/python bench/events.py --streams 10 --events 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402
import websockets  # noqa: E402

REDIS_DB = 10


def _prepare(data_dir: Path, streams: int) -> list[tuple[str, str, str, str]]:
    """Threads with a booting run each and a registered driver: (session, run, instance, token)."""
    from mosoo_core import identity, sessions
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade
    from mosoo_core.tables.agents import Agent
    from mosoo_core.tables.sessions import SessionRun

    upgrade()
    out = []
    with session_scope() as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="bench@example.com", email="bench@example.com"
        )
        app_id = identity.list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="bench", model="m")
        db.add(agent)
        db.flush()
        for _ in range(streams):
            thread = sessions.create_session(db, account.id, app_id, agent.id)
            sent = sessions.send_message(db, account.id, thread.id, "go")
            driver = sessions.register_driver(
                db,
                app_id=app_id,
                subject=f"session:{thread.id}",
                runtime="openai",
                session_id=thread.id,
            )
            run = db.get(SessionRun, sent.run.id)
            assert run is not None
            run.driver_instance_id, run.status = driver.instance_id, "running"
            out.append((thread.id, run.id, driver.instance_id, driver.boot_token))
    return out


async def _driver(
    socket_path: str,
    session_id: str,
    run_id: str,
    instance_id: str,
    token: str,
    events: int,
    batch: int,
    sent_at: dict[str, float],
) -> None:
    async with websockets.unix_connect(
        socket_path, uri="ws://control/driver/socket", max_size=None
    ) as ws:
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "driver_instance_id": instance_id,
                    "boot_token": token,
                    "protocol_version": 1,
                    "driver_version": "bench",
                    "runtime": "openai",
                    "capabilities": [],
                    "pid": os.getpid(),
                }
            )
        )
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        sent = 0
        while sent < events:
            size = min(batch, events - sent)
            ids = [f"{instance_id}-{sent + i}" for i in range(size)]
            now = time.perf_counter()
            for source_id in ids:
                sent_at[f"{session_id}:{source_id}"] = now
            frame = {
                "type": "events",
                "events": [
                    {
                        "source_event_id": s,
                        "run_id": run_id,
                        "kind": "message.delta",
                        "occurred_at": "2026-01-01T00:00:00+00:00",
                        "payload": {"text": "tok ", "sid": s},
                    }
                    for s in ids
                ],
            }
            await ws.send(json.dumps(frame))
            while True:
                reply = json.loads(await ws.recv())
                if reply["type"] == "ack":
                    break
            sent += size


async def _viewer(
    redis_url: str, session_id: str, expected: int, received_at: dict[str, float]
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    last = "0-0"
    seen = 0
    while seen < expected:
        answer = await client.xread({f"session:{session_id}:events": last}, block=5000, count=500)
        for _stream, entries in answer or []:
            for entry_id, fields in entries:
                last = entry_id
                event = json.loads(fields[b"event"])
                sid = event["payload"].get("sid")
                if sid:
                    received_at[f"{session_id}:{sid}"] = time.perf_counter()
                    seen += 1
    await client.aclose()


async def _round(
    socket_path: str,
    redis_url: str,
    threads: list[tuple[str, str, str, str]],
    events: int,
    batch: int,
) -> dict[str, float]:
    sent_at: dict[str, float] = {}
    received_at: dict[str, float] = {}
    viewers = [asyncio.create_task(_viewer(redis_url, t[0], events, received_at)) for t in threads]
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    await asyncio.gather(*(_driver(socket_path, *t, events, batch, sent_at) for t in threads))
    ingest_seconds = time.perf_counter() - started
    await asyncio.wait_for(asyncio.gather(*viewers), 120)
    latencies = sorted((received_at[k] - sent_at[k]) * 1000 for k in sent_at if k in received_at)
    total = len(threads) * events
    return {
        "streams": len(threads),
        "events": total,
        "events_per_second": total / ingest_seconds,
        "latency_p50_ms": statistics.median(latencies),
        "latency_p95_ms": latencies[int(len(latencies) * 0.95) - 1],
        "latency_max_ms": latencies[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, nargs="*", default=[1, 50])
    parser.add_argument("--events", type=int, default=400, help="events per stream")
    parser.add_argument(
        "--batch", type=int, default=8, help="events per batch (the driver sends up to 64)"
    )
    args = parser.parse_args()

    import subprocess

    import redis

    work = Path(tempfile.mkdtemp(prefix="mosoo-bench-events-"))
    redis_url = f"redis://127.0.0.1:6379/{REDIS_DB}"
    env = {
        **os.environ,
        "MOSOO_DATA_DIR": str(work),
        "MOSOO_REDIS_URL": redis_url,
        "MOSOO_LOG_LEVEL": "WARNING",
        "MOSOO_CONTROL_PORT": "0",
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith("MOSOO_")})
    redis.Redis(db=REDIS_DB).flushdb()
    threads = _prepare(work, sum(args.streams))
    control = subprocess.Popen(
        [sys.executable, "-m", "mosoo_core.cli", "control"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    socket_path = work / "run" / "control" / "control.sock"
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            if time.monotonic() > deadline:
                raise SystemExit("control did not start")
            time.sleep(0.1)
        time.sleep(0.5)
        offset = 0
        print(
            f"one control process, SQLite, {args.events} events per stream in batches of {args.batch}"
        )
        for count in args.streams:
            result = asyncio.run(
                _round(
                    str(socket_path),
                    redis_url,
                    threads[offset : offset + count],
                    args.events,
                    args.batch,
                )
            )
            offset += count
            print(
                f"  {result['streams']:>3} stream(s): {result['events_per_second']:8.0f} events/s stored+acked; "
                f"driver->viewer latency p50 {result['latency_p50_ms']:.1f} ms, p95 {result['latency_p95_ms']:.1f} ms, "
                f"max {result['latency_max_ms']:.1f} ms"
            )
    finally:
        control.terminate()
        control.wait(20)
        redis.Redis(db=REDIS_DB).flushdb()


if __name__ == "__main__":
    main()
