"""The public API v1 under load, as a real `mosoo web` serves it and as the FastAPI app alone.

Requests: an authenticated `GET /api/v1/threads/{id}` (a thread with a finished run and its
usage records, so the answer reads the thread, its latest run and the run's usage), at
concurrency 1 and 10, driven by `wrk` (a C load generator: `apt-get install wrk`) with
keep-alive connections, against two servers of the same code:

- `web`: `mosoo web` itself (Reflex in production mode, granian, one process: the same app
  and middlewares a deployment serves; its frontend is built in a temp dir first, ~1 min);
- `api`: the FastAPI app of `mosoo_web.api` alone under uvicorn (what this bench measured
  before `web` was added: it shows what Reflex's wrapping costs).

With `--baseline REF` the same servers also run the code of that git commit (exported to a
temp dir), measured turn about with the working tree's, round by round. Each line gives
requests/s, latency p50/p95/p99/max, the server's CPU per request (every process and thread
of it, from /proc) and what `wrk` itself used: it shares the machine's cores with the server.

SSE: store+publish to client latency and deliveries/s (1 and `--clients` viewers). Upload:
64 MiB through `POST /agents/{id}/files` (time, and how much the server's memory grew), and
its download.

SQLite in a temp dir, the filesystem object store, Redis `db_number(9)` (shifted by
MOSOO_TEST_REDIS_DB_OFFSET). The rate limit is set to 1,000,000 requests a minute: it still
counts every request in Redis (that round trip is measured) but never refuses one.

    .venv/bin/python bench/api.py
    .venv/bin/python bench/api.py --only requests --baseline HEAD~5 --rounds 3 --seconds 10
    .venv/bin/python bench/api.py --only sse --events 2000 --clients 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import redis  # noqa: E402

from tests.support.processes import free_port, mosoo_env, stop_group, wait_for  # noqa: E402
from tests.support.redis_db import db_number  # noqa: E402

REDIS_DB = db_number(9)
UPLOAD_BYTES = 64 * 1024 * 1024 - 1024
RATE_LIMIT = 1_000_000
GOAL_RPS = 1000  # issue 15, at concurrency 10 on SQLite, from one web process
GOAL_P99_MS = 20.0
# wrk's own percentiles (its histogram keeps every request), printed by its `done` hook.
WRK_REPORT = """
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout
  io.write(string.format("RESULT %d %d %d %d %d %d %d %d\\n", summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(95), latency:percentile(99),
    latency.max, errors, summary.errors.status))
end
"""


@dataclass(frozen=True)
class Fixture:
    token: str
    agent_id: str
    thread_id: str


@dataclass
class Server:
    kind: str  # web | api
    code: str  # current | the baseline ref
    process: subprocess.Popen[bytes]
    base: str


@dataclass(frozen=True)
class Load:
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    server_cpu_ms: float  # per request, every process and thread of the server
    wrk_cpu_ms: float  # per request


def _prepare() -> Fixture:
    """An owner with a published agent and a token; a thread with one finished run that made
    three model calls (GET /threads/{id} reads the run and sums its usage)."""
    from mosoo_core import agents, identity, sessions, usage, vault
    from mosoo_core.clock import utcnow
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade
    from mosoo_core.tables.sessions import SessionRun

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
            db,
            account.id,
            app_id,
            agent.id,
            agents.AgentChanges(provider_credential_id=credential.id, model="m"),
        )
        agents.publish_agent(db, account.id, app_id, agent.id)
        thread = sessions.create_session(db, account.id, app_id, agent.id, purpose="api")
        # A run as a worker leaves it: no worker runs here, the bench only reads it.
        started = utcnow() - timedelta(minutes=1)
        run = SessionRun(
            session_id=thread.id,
            app_id=app_id,
            status="completed",
            input_text="Hello",
            created_at=started,
            started_at=started,
            finished_at=started + timedelta(seconds=5),
        )
        db.add(run)
        db.flush()
        for call in range(3):
            usage.record_usage(
                db,
                app_id=app_id,
                provider="openai_compatible",
                model="m",
                numbers=usage.UsageNumbers(input_tokens=1000 + call, output_tokens=100),
                agent_id=agent.id,
                session_id=thread.id,
                run_id=run.id,
                purpose="api",
                at=started + timedelta(seconds=call),
            )
        token = identity.create_access_token(db, account.id, "bench")
        return Fixture(token.secret, agent.id, thread.id)


def _export(ref: str, into: Path) -> Path:
    """The tree of a git commit, to serve it beside the working tree's code."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _start(kind: str, code: str, root: Path, env: dict[str, str], logs: Path) -> Server:
    """`web`: `mosoo web`; `api`: the FastAPI app alone under uvicorn; either from `root`
    (its modules come first on the path: the process runs there)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    if kind == "web":
        env = {**env, "MOSOO_WEB_PORT": str(port), "MOSOO_PUBLIC_URL": base}
        env["REFLEX_WEB_WORKDIR"] = str(logs / f"reflex-web-{port}")
        env["REFLEX_STATES_WORKDIR"] = str(logs / f"reflex-states-{port}")
        argv = [sys.executable, "-m", "mosoo_core.cli", "web"]
    else:
        argv = [
            sys.executable,
            "-c",
            "import uvicorn; from mosoo_web.api import build_api; "
            f"uvicorn.run(build_api(), host='127.0.0.1', port={port}, log_level='warning', "
            "lifespan='off')",
        ]
    with open(logs / f"{kind}-{port}.log", "wb") as log:
        process = subprocess.Popen(
            argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(kind, code, process, base)
    try:
        wait_for(lambda: _answers(base), 900, f"{kind} ({code}) to answer", process)
    except BaseException:
        stop_group(process)
        print((logs / f"{kind}-{port}.log").read_text(errors="replace")[-3000:])
        raise
    return server


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _tree_cpu_seconds(pid: int) -> float:
    """User and system time of a process, its threads and every descendant still running."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            # The command name may hold spaces: the fields start after its closing parenthesis.
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            total += int(stats[current][11]) + int(stats[current][12])
        todo += children.get(current, [])
    return total / ticks


def _wrk(server: Server, fixture: Fixture, concurrency: int, seconds: float, script: Path) -> Load:
    before_server = _tree_cpu_seconds(server.process.pid)
    before_wrk = resource.getrusage(resource.RUSAGE_CHILDREN)
    answer = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            f"-d{seconds:g}s",
            "-s",
            str(script),
            "-H",
            f"Authorization: Bearer {fixture.token}",
            f"{server.base}/api/v1/threads/{fixture.thread_id}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    after_wrk = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = _tree_cpu_seconds(server.process.pid) - before_server
    found = re.search(r"^RESULT (.*)$", answer.stdout, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"wrk gave no result: {answer.stdout}{answer.stderr}")
    requests, micros, p50, p95, p99, worst, errors, refused = map(int, found.group(1).split())
    if errors or refused:
        raise RuntimeError(
            f"{server.kind} ({server.code}): {errors} socket errors, {refused} answers not 2xx"
        )
    wrk_cpu = (after_wrk.ru_utime + after_wrk.ru_stime) - (
        before_wrk.ru_utime + before_wrk.ru_stime
    )
    return Load(
        rps=requests / (micros / 1e6),
        p50_ms=p50 / 1000,
        p95_ms=p95 / 1000,
        p99_ms=p99 / 1000,
        max_ms=worst / 1000,
        server_cpu_ms=server_cpu * 1000 / requests,
        wrk_cpu_ms=wrk_cpu * 1000 / requests,
    )


def _line(server: Server, concurrency: int, load: Load) -> str:
    return (
        f"{server.kind:3} {server.code:>12} c{concurrency:<2} {load.rps:7,.0f} req/s  "
        f"p50 {load.p50_ms:5.1f} / p95 {load.p95_ms:5.1f} / p99 {load.p99_ms:5.1f} / "
        f"max {load.max_ms:6.1f} ms  server {load.server_cpu_ms:.2f} ms CPU/req  "
        f"wrk {load.wrk_cpu_ms:.3f} ms CPU/req"
    )


def _requests(
    servers: list[Server], fixture: Fixture, rounds: int, seconds: float, temp: Path
) -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("bench/api.py needs wrk for the requests: apt-get install wrk")
    script = temp / "report.lua"
    script.write_text(WRK_REPORT)
    for server in servers:  # warm-up: first connections, compiled statements, lazy imports
        _wrk(server, fixture, 10, 2, script)
    results: dict[tuple[str, str, int], list[Load]] = {}
    for number in range(1, rounds + 1):
        print(f"round {number}/{rounds}, load {_load()}")
        for concurrency in (1, 10):
            for server in servers:
                load = _wrk(server, fixture, concurrency, seconds, script)
                results.setdefault((server.kind, server.code, concurrency), []).append(load)
                print("  " + _line(server, concurrency, load))
    print(f"median of {rounds} round(s) of {seconds:g} s, load {_load()}:")
    for server in servers:
        for concurrency in (1, 10):
            loads = results[(server.kind, server.code, concurrency)]
            print("  " + _line(server, concurrency, _median(loads)))
    for server in servers:
        if server.code == "current":
            load = _median(results[(server.kind, server.code, 10)])
            met = load.rps >= GOAL_RPS and load.p99_ms <= GOAL_P99_MS
            print(
                f"goal ({server.kind}, c10: at least {GOAL_RPS:,} req/s, p99 at most "
                f"{GOAL_P99_MS:g} ms): {'met' if met else 'NOT met'}"
            )


def _median(loads: list[Load]) -> Load:
    """Each figure's median over the rounds."""
    return Load(
        rps=statistics.median(load.rps for load in loads),
        p50_ms=statistics.median(load.p50_ms for load in loads),
        p95_ms=statistics.median(load.p95_ms for load in loads),
        p99_ms=statistics.median(load.p99_ms for load in loads),
        max_ms=statistics.median(load.max_ms for load in loads),
        server_cpu_ms=statistics.median(load.server_cpu_ms for load in loads),
        wrk_cpu_ms=statistics.median(load.wrk_cpu_ms for load in loads),
    )


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def _pcts(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms / p95 {p95 * 1000:.1f} ms / max {ordered[-1] * 1000:.1f} ms"


async def _sse(
    base: str, headers: dict[str, str], thread_id: str, events: int, clients: int
) -> None:
    from mosoo_core import streams
    from mosoo_core.db import session_scope
    from mosoo_core.sessions.driver_plane import NewEvent, append_events
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
                stored = append_events(
                    db,
                    thread_id,
                    [
                        NewEvent(
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


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("requests", "sse", "upload"),
        help="Run only these parts (repeat the option); all of them by default.",
    )
    parser.add_argument(
        "--servers",
        default="web,api",
        help="Which servers the requests go to: web, api or both (default web,api).",
    )
    parser.add_argument("--baseline", help="A git commit to measure turn about with this tree.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10, help="Of each wrk run.")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    parts = set(args.only or ("requests", "sse", "upload"))
    kinds = [kind for kind in args.servers.split(",") if kind]
    if not set(kinds) <= {"web", "api"}:
        parser.error("--servers takes web, api or both")
    if "requests" in parts and shutil.which("wrk") is None:
        raise SystemExit("bench/api.py needs wrk for the requests: apt-get install wrk")

    with tempfile.TemporaryDirectory(prefix="mosoo-bench-api-") as name:
        temp = Path(name)
        data = temp / "data"
        redis_url = f"redis://127.0.0.1:6379/{REDIS_DB}"
        settings = {
            "MOSOO_DATA_DIR": str(data),
            "MOSOO_REDIS_URL": redis_url,
            "MOSOO_API_RATE_LIMIT_PER_MINUTE": str(RATE_LIMIT),
            "MOSOO_LOG_LEVEL": "WARNING",
        }
        os.environ.update(settings)
        redis.Redis.from_url(redis_url).flushdb()
        fixture = _prepare()
        env = mosoo_env(data, f"sqlite:///{(data / 'mosoo.db').resolve()}", **settings)
        codes = [("current", ROOT)]
        if args.baseline:
            codes.append((args.baseline, _export(args.baseline, temp / "baseline")))
        servers: list[Server] = []
        try:
            print(f"load before the servers start: {_load()}")
            if "requests" in parts:
                for kind in kinds:
                    for code, root in codes:
                        servers.append(_start(kind, code, root, env, temp))
                _requests(servers, fixture, args.rounds, args.seconds, temp)
            if parts & {"sse", "upload"}:
                api = next(
                    (s for s in servers if s.kind == "api" and s.code == "current"), None
                ) or _start("api", "current", ROOT, env, temp)
                servers.append(api)
                headers = {"Authorization": f"Bearer {fixture.token}"}
                if "sse" in parts:
                    asyncio.run(_sse(api.base, headers, fixture.thread_id, args.events, 1))
                    asyncio.run(
                        _sse(api.base, headers, fixture.thread_id, args.events, args.clients)
                    )
                if "upload" in parts:
                    _upload(api.base, headers, fixture.agent_id, api.process.pid)
        finally:
            for server in servers:
                stop_group(server.process)
            redis.Redis.from_url(redis_url).flushdb()


if __name__ == "__main__":
    main()
