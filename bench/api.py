"""The public API v1 in a real uvicorn server on a loopback port: request latency, SSE
delivery latency and throughput, and a 64 MiB upload (time and how much the server's memory
grew while it streamed the file to the store).

SQLite in a temp dir, the filesystem object store, Redis db 9. The API runs in a child
process (the same FastAPI app `mosoo web` serves at /api), so its memory is measured alone.

    .venv/bin/python bench/api.py
    .venv/bin/python bench/api.py --events 2000 --clients 20 --requests 500
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

REDIS_DB = 9
UPLOAD_BYTES = 64 * 1024 * 1024 - 1024


def _prepare() -> tuple[str, str, str]:
    """An owner with a published agent and a token; a thread to stream. (token, agent, thread)"""
    from mosoo_core import agents, identity, sessions, vault
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade

    upgrade()
    with session_scope() as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="bench@example.com", email="bench@example.com"
        )
        app_id = identity.list_apps(db, account.id)[0].id
        credential = vault.create_provider_credential(
            db,
            account.id,
            app_id,
            vault.ProviderCredentialInput(
                name="Local",
                provider="openai_compatible",
                base_url="http://127.0.0.1:9/v1",
                api_key="sk-bench",
                models=["m"],
            ),
        )
        agent = agents.create_agent(db, account.id, app_id, name="bench", kind="cattle")
        agents.update_agent(
            db, account.id, app_id, agent.id, provider_credential_id=credential.id, model="m"
        )
        agents.publish_agent(db, account.id, app_id, agent.id)
        thread = sessions.create_session(db, account.id, app_id, agent.id, purpose="api")
        token = identity.create_access_token(db, account.id, "bench")
        return token.secret, agent.id, thread.id


def _serve(port: int) -> subprocess.Popen[bytes]:
    code = (
        "import uvicorn; from mosoo_web.api import build_api; "
        f"uvicorn.run(build_api(), host='127.0.0.1', port={port}, log_level='warning', lifespan='off')"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=os.environ.copy())


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _pcts(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms / p95 {p95 * 1000:.1f} ms / max {ordered[-1] * 1000:.1f} ms"


async def _requests(
    base: str, headers: dict[str, str], thread_id: str, count: int, concurrency: int
) -> None:
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:

        async def worker(n: int) -> None:
            for _ in range(n):
                started = time.perf_counter()
                answer = await client.get(f"/api/v1/threads/{thread_id}")
                answer.raise_for_status()
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker(count // concurrency) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    print(
        f"GET /threads/{{id}}, {len(latencies)} requests at concurrency {concurrency}: "
        f"{len(latencies) / elapsed:,.0f} req/s, {_pcts(latencies)}"
    )


async def _sse(
    base: str, headers: dict[str, str], thread_id: str, events: int, clients: int
) -> None:
    from mosoo_core import sessions, streams
    from mosoo_core.db import session_scope
    from mosoo_core.tables.sessions import AgentSession

    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    received = [0] * clients
    with session_scope() as db:
        row = db.get(AgentSession, thread_id)
        assert row is not None
        start_seq = row.last_seq

    async def viewer(index: int, ready: asyncio.Event) -> None:
        async with (
            httpx.AsyncClient(base_url=base, headers=headers, timeout=None) as client,
            client.stream(
                "GET",
                f"/api/v1/threads/{thread_id}/events/stream",
                headers={"Last-Event-ID": str(start_seq)},
            ) as answer,
        ):
            ready.set()
            async for line in answer.aiter_lines():
                if line.startswith("id: "):
                    seq = int(line[4:])
                    if seq in sent_at:
                        latencies.append(time.perf_counter() - sent_at[seq])
                    received[index] += 1
                    if received[index] >= events:
                        return

    readies = [asyncio.Event() for _ in range(clients)]
    tasks = [asyncio.create_task(viewer(i, readies[i])) for i in range(clients)]
    await asyncio.gather(*(r.wait() for r in readies))
    await asyncio.sleep(0.5)  # every viewer past its database read

    def produce() -> None:
        batch = 8
        for first in range(0, events, batch):
            with session_scope() as db:
                stored = sessions.append_events(
                    db,
                    thread_id,
                    [
                        sessions.NewEvent(
                            type="agent.message.delta", payload={"text": f"token {first + i} "}
                        )
                        for i in range(min(batch, events - first))
                    ],
                )
            now = time.perf_counter()
            for event in stored:
                sent_at[event.seq] = now
            streams.publish_events(stored)

    started = time.perf_counter()
    await asyncio.to_thread(produce)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    elapsed = time.perf_counter() - started
    print(
        f"SSE: {events:,} events to {clients} client(s) in {elapsed:.2f} s "
        f"({events * clients / elapsed:,.0f} deliveries/s); store+publish → client {_pcts(latencies)}"
    )


def _upload(base: str, headers: dict[str, str], agent_id: str, server_pid: int) -> None:
    boundary = "benchboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    block = os.urandom(1024 * 1024)

    def body() -> Iterator[bytes]:
        yield head
        left = UPLOAD_BYTES
        while left:
            chunk = block[: min(len(block), left)]
            left -= len(chunk)
            yield chunk
        yield tail

    peak = before = _rss_kib(server_pid)
    stop = False

    def sample() -> None:
        nonlocal peak
        while not stop:
            peak = max(peak, _rss_kib(server_pid))
            time.sleep(0.01)

    import threading

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    answer = httpx.post(
        f"{base}/api/v1/agents/{agent_id}/files",
        headers={
            **headers,
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(head) + UPLOAD_BYTES + len(tail)),
        },
        content=body(),
        timeout=300,
    )
    elapsed = time.perf_counter() - started
    stop = True
    sampler.join()
    answer.raise_for_status()
    file_id = answer.json()["id"]
    print(
        f"upload {UPLOAD_BYTES / 2**20:.0f} MiB: {elapsed:.2f} s ({UPLOAD_BYTES / 2**20 / elapsed:,.0f} MiB/s); "
        f"server RSS {before / 1024:.0f} → peak {peak / 1024:.0f} MiB (+{(peak - before) / 1024:.0f} MiB)"
    )
    started = time.perf_counter()
    size = 0
    with httpx.stream(
        "GET", f"{base}/api/v1/files/{file_id}/content", headers=headers, timeout=300
    ) as download:
        for chunk in download.iter_bytes():
            size += len(chunk)
    elapsed = time.perf_counter() - started
    print(f"download {size / 2**20:.0f} MiB: {elapsed:.2f} s ({size / 2**20 / elapsed:,.0f} MiB/s)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    import redis

    from tests.support.processes import free_port, wait_for

    with tempfile.TemporaryDirectory(prefix="mosoo-bench-api-") as temp:
        os.environ.update(
            {
                "MOSOO_DATA_DIR": temp,
                "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
                "MOSOO_API_RATE_LIMIT_PER_MINUTE": "1000000",
                "MOSOO_LOG_LEVEL": "WARNING",
            }
        )
        redis.Redis.from_url(os.environ["MOSOO_REDIS_URL"]).flushdb()
        token, agent_id, thread_id = _prepare()
        port = free_port()
        server = _serve(port)
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"}
        try:
            wait_for(lambda: _answers(base), 30, "the API server", server)
            asyncio.run(_requests(base, headers, thread_id, args.requests, 1))
            asyncio.run(_requests(base, headers, thread_id, args.requests, 10))
            asyncio.run(_sse(base, headers, thread_id, args.events, 1))
            asyncio.run(_sse(base, headers, thread_id, args.events, args.clients))
            _upload(base, headers, agent_id, server.pid)
        finally:
            server.terminate()
            server.wait(20)
            redis.Redis.from_url(os.environ["MOSOO_REDIS_URL"]).flushdb()


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/v1/openapi.json", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
