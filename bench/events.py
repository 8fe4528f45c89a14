"""Events through one control process: throughput and driver-to-viewer latency.

For each database and each number of concurrent streams, starts a real `mosoo control`, then
a load process that plays one driver per stream with the driver's own connection code
(`driver.connection.ControlConnection`: its batching, its pipelining, acks) and one viewer
per stream with the console's and the API's own follow loop (`event_feed.ThreadFeed`); the
load is always this file's, with the drivers' and viewers' code of the tree measured, and it
leaves its start-up objects out of garbage collections as control does (one process plays
what are a hundred in use: its full collections would count against control). Two phases
on the same connections:

- flood: every stream emits `--events` events at once; events/s is the number stored and
  acknowledged over the time until the last ack (the process's capacity);
- paced: the streams together emit `--rate` events a second (split evenly) for
  `--seconds`; latency runs from a driver's `emit` to a viewer holding the event.

With `--baseline DIR` (a checkout of an earlier commit, e.g. `git archive <sha> | tar -x -C
DIR`) each case runs control and the load from that checkout too, turn about with this one;
each side's database is made by its own migrations.

`--writer` measures only what bounds the process first: control's event writer storing a
group (`_event_writer._store_group`: one transaction, as many batches as came during the
last commit), in one process, no sockets. `--batches` batches of `--batch-events` events
from as many drivers make a group (the default, 24 of 11, is what a group held in the paced
phase at 10,000 events/s); the figure is µs of the writer's time per event stored, the
median over `--groups` groups, run `--rounds` times turn about with `--baseline`.

    .venv/bin/python bench/events.py --postgres-url postgresql+psycopg://mosoo:mosoo@127.0.0.1:5432/<db>
    .venv/bin/python bench/events.py --databases sqlite --streams 50 --baseline /tmp/base
    .venv/bin/python bench/events.py --writer --baseline /tmp/base --postgres-url ...

The PostgreSQL database named is emptied (its public schema dropped) before each case.
Redis db 10 (shifted by MOSOO_TEST_REDIS_DB_OFFSET) is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REDIS_DB = 10 + int(os.environ.get("MOSOO_TEST_REDIS_DB_OFFSET", "0"))
TICK_SECONDS = 0.005  # the paced phase's emission tick


# --- the orchestrator: databases, control processes, turn about ----------------------------


def _prepare(streams: int) -> list[dict[str, str]]:
    """Threads with a running run each and a registered driver (boot tokens last 60 s, so
    this runs right before each case)."""
    from mosoo_core import identity, sessions
    from mosoo_core.db import session_scope
    from mosoo_core.sessions import driver_plane
    from mosoo_core.tables.agents import Agent
    from mosoo_core.tables.sessions import SessionRun

    out = []
    with session_scope() as db:
        email = f"bench-{time.time_ns()}@example.com"
        account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
        app_id = identity.list_apps(db, account.id)[0].id
        agent = Agent(app_id=app_id, name="bench", model="m")
        db.add(agent)
        db.flush()
        for _ in range(streams):
            thread = sessions.create_session(db, account.id, app_id, agent.id)
            sent = sessions.send_message(db, account.id, thread.id, "go")
            driver = driver_plane.register_driver(
                db,
                app_id=app_id,
                subject=f"session:{thread.id}",
                runtime="openai",
                session_id=thread.id,
            )
            run = db.get(SessionRun, sent.run.id)
            assert run is not None
            run.driver_instance_id, run.status = driver.instance_id, "running"
            out.append(
                {
                    "account_id": account.id,
                    "session_id": thread.id,
                    "run_id": run.id,
                    "instance_id": driver.instance_id,
                    "boot_token": driver.boot_token,
                }
            )
    return out


def _fresh_database(kind: str, work: Path, postgres_url: str, root: Path = ROOT) -> str:
    """An empty database, migrated by `root`'s own migrations (a baseline's schema is its
    own)."""
    import sqlalchemy as sa

    from mosoo_core import db as db_module

    db_module.dispose_engines()
    if kind == "sqlite":
        url = f"sqlite:///{work / f'mosoo-{time.time_ns()}.db'}"
    else:
        url = postgres_url
        engine = sa.create_engine(url)
        with engine.begin() as connection:
            connection.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
            connection.execute(sa.text("CREATE SCHEMA public"))
        engine.dispose()
    os.environ["MOSOO_DATABASE_URL"] = url
    subprocess.run(
        [sys.executable, "-m", "mosoo_core.cli", "migrate"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
        capture_output=True,
    )
    from mosoo_core.settings import reset_settings_cache

    reset_settings_cache()
    return url


def _control_up(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(2)
            client.connect(str(socket_path))
            client.sendall(b"GET /control/health HTTP/1.1\r\nhost: control\r\n\r\n")
            return b" 200 " in client.recv(4096)
    except OSError:
        return False


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_case(root: Path, env: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    """One control process from `root` and one load process from `root`; the load's figures."""
    import redis

    redis.Redis(db=REDIS_DB).flushdb()
    socket_path = Path(env["MOSOO_DATA_DIR"]) / "run" / "control" / "control.sock"
    control = subprocess.Popen(
        [sys.executable, "-m", "mosoo_core.cli", "control"],
        cwd=root,
        env={**env, "PYTHONPATH": str(root)},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _control_up(socket_path):
            if control.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("control did not start")
            time.sleep(0.1)
        cpu_before = _cpu_seconds(control.pid)
        load = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--load", str(root)],
            input=json.dumps({**spec, "socket_path": str(socket_path)}),
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        if load.returncode != 0:
            raise SystemExit(f"the load failed:\n{load.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(load.stdout.strip().splitlines()[-1])
        result["control_cpu_seconds"] = _cpu_seconds(control.pid) - cpu_before
        return result
    finally:
        control.terminate()
        control.wait(20)
        redis.Redis(db=REDIS_DB).flushdb()


def _line(label: str, result: dict[str, Any]) -> str:
    flood, paced = result["flood"], result["paced"]
    return (
        f"    {label:<9} flood {flood['events_per_second']:7.0f} ev/s "
        f"(p50 {flood['p50']:6.1f} p99 {flood['p99']:7.1f} max {flood['max']:7.1f} ms) | "
        f"paced {paced['events_per_second']:6.0f} ev/s: p50 {paced['p50']:5.1f} "
        f"p95 {paced['p95']:5.1f} p99 {paced['p99']:6.1f} max {paced['max']:6.1f} ms | "
        f"CPU: control {result['control_cpu_seconds']:.1f} s, load {result['load_cpu_seconds']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--load", help=argparse.SUPPRESS)  # internal: play the load from ROOT
    parser.add_argument("--streams", type=int, nargs="*", default=[1, 50, 200])
    parser.add_argument("--databases", nargs="*", default=["sqlite", "postgresql"])
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("MOSOO_BENCH_POSTGRES_URL", ""),
        help="a database of your own: it is emptied (default: $MOSOO_BENCH_POSTGRES_URL)",
    )
    parser.add_argument("--events", type=int, default=400, help="events per stream (flood)")
    parser.add_argument("--rate", type=int, default=10_000, help="events/s in all (paced)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of the paced phase")
    parser.add_argument("--baseline", type=Path, help="a checkout to compare, turn about")
    parser.add_argument("--writer", action="store_true", help="the event writer alone")
    parser.add_argument("--writer-child", help=argparse.SUPPRESS)  # internal: from this ROOT
    parser.add_argument("--batches", type=int, default=24, help="--writer: batches a group")
    parser.add_argument("--batch-events", type=int, default=11, help="--writer: events a batch")
    parser.add_argument("--groups", type=int, default=150, help="--writer: groups measured")
    parser.add_argument("--rounds", type=int, default=3, help="--writer: runs of each side")
    args = parser.parse_args()
    if args.load:
        sys.path.insert(0, args.load)
        print(json.dumps(asyncio.run(_load(json.loads(sys.stdin.read())))))
        return
    if args.writer_child:
        sys.path.insert(0, args.writer_child)
        print(json.dumps(_writer_case(json.loads(sys.stdin.read()))))
        return
    if "postgresql" in args.databases and not args.postgres_url:
        raise SystemExit("--postgres-url (or MOSOO_BENCH_POSTGRES_URL) names the database to use")
    sys.path.insert(0, str(ROOT))

    work = Path(tempfile.mkdtemp(prefix="mosoo-bench-events-"))
    redis_url = f"redis://127.0.0.1:6379/{REDIS_DB}"
    os.environ.update(
        MOSOO_DATA_DIR=str(work),
        MOSOO_REDIS_URL=redis_url,
        MOSOO_LOG_LEVEL="WARNING",
        MOSOO_CONTROL_PORT="0",
    )
    roots = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    if args.writer:
        _writer_cases(args, work, roots)
        return
    print(
        f"one control process; flood {args.events} events a stream, paced {args.rate} events/s "
        f"for {args.seconds:g} s; load {os.getloadavg()[0]:.2f}"
    )
    for kind in args.databases:
        for count in args.streams:
            print(f"  {kind}, {count} stream(s):")
            # Turn about: the order flips from one case to the next.
            order = roots if count % 2 == 0 else list(reversed(roots))
            for label, root in order:
                database_url = _fresh_database(kind, work, args.postgres_url, root)
                spec = {
                    "threads": _prepare(count),
                    "events": args.events,
                    "rate": args.rate,
                    "seconds": args.seconds,
                }
                result = _run_case(root, dict(os.environ, MOSOO_DATABASE_URL=database_url), spec)
                print(_line(label, result), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def _writer_cases(args: argparse.Namespace, work: Path, roots: list[tuple[str, Path]]) -> None:
    print(
        f"control's event writer alone: groups of {args.batches} batches of "
        f"{args.batch_events} events, median of {args.groups} groups, {args.rounds} rounds "
        f"turn about; load {os.getloadavg()[0]:.2f}"
    )
    for kind in args.databases:
        figures: dict[str, list[float]] = {label: [] for label, _ in roots}
        slowest: dict[str, list[float]] = {label: [] for label, _ in roots}
        for round_number in range(args.rounds):
            order = roots if round_number % 2 == 0 else list(reversed(roots))
            for label, root in order:
                database_url = _fresh_database(kind, work, args.postgres_url, root)
                spec = {
                    "threads": _prepare(args.batches),
                    "batch_events": args.batch_events,
                    "groups": args.groups,
                }
                child = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--writer-child", str(root)],
                    input=json.dumps(spec),
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, MOSOO_DATABASE_URL=database_url),
                    timeout=600,
                    check=False,
                )
                if child.returncode != 0:
                    raise SystemExit(f"the writer case failed:\n{child.stderr[-4000:]}")
                answer = json.loads(child.stdout.strip().splitlines()[-1])
                figures[label].append(answer["median"])
                slowest[label].append(answer["p99"])
        print(f"  {kind}:")
        for label, medians in figures.items():
            print(
                f"    {label:<9} {statistics.median(medians):6.1f} µs/event "
                f"(rounds: {', '.join(f'{m:.1f}' for m in medians)}); the slowest group in a "
                f"hundred: {statistics.median(slowest[label]):6.1f} µs/event"
            )
        if len(roots) == 2:
            ratio = statistics.median(figures["this"]) / statistics.median(figures["baseline"])
            tail = statistics.median(slowest["this"]) / statistics.median(slowest["baseline"])
            print(f"    this / baseline: {ratio:.2f}x, the slowest group in a hundred {tail:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def _writer_case(spec: dict[str, Any]) -> dict[str, float]:
    """In the writer child, with its checkout first on the path: the threads' drivers made
    connected, a few unmeasured groups, then `groups` groups stored one by one."""
    from driver.connection import new_source_event_id, utc_now
    from driver.protocol import DriverEvent
    from mosoo_core.control import _event_writer as writer
    from mosoo_core.db import session_scope
    from mosoo_core.tables.sessions import DriverInstance

    threads, connection_id = spec["threads"], "C" * 26
    try:  # as control checkpoints SQLite's log (a checkout from before mosoo_core.wal did not)
        from mosoo_core import wal
    except ImportError:
        checkpointer = None
    else:
        from mosoo_core.db import get_engine

        checkpointer = wal.checkpoint_in_a_thread(get_engine())
    with session_scope() as db:
        for thread in threads:
            instance = db.get(DriverInstance, thread["instance_id"])
            assert instance is not None
            instance.connection_id, instance.status = connection_id, "connected"
            db.add(instance)

    def group() -> list[Any]:
        loop = asyncio.new_event_loop()  # a batch's answer is a future; nobody awaits it here
        batches = []
        for thread in threads:
            events = [
                DriverEvent(
                    source_event_id=new_source_event_id(),
                    run_id=thread["run_id"],
                    kind="message.delta",
                    occurred_at=utc_now(),
                    payload={"text": "tok ", "n": number},
                )
                for number in range(spec["batch_events"])
            ]
            done = loop.create_future()
            batches.append(writer._Batch(thread["instance_id"], connection_id, events, False, done))
        loop.close()
        return batches

    for _ in range(10):
        writer._store_group(group())
    samples = []
    for _ in range(spec["groups"]):
        batches = group()
        started = time.perf_counter()
        writer._store_group(batches)
        elapsed = time.perf_counter() - started
        failed = [batch.error for batch in batches if batch.error is not None]
        if failed:
            raise SystemExit(f"a batch was refused: {failed[0]!r}")
        samples.append(elapsed / sum(len(batch.events) for batch in batches) * 1e6)
    if checkpointer is not None:
        checkpointer.stop()
    ordered = sorted(samples)
    return {"median": statistics.median(samples), "p99": ordered[int(0.99 * (len(ordered) - 1))]}


# --- the load process: drivers and viewers ---------------------------------------------------


def _percentiles(latencies: list[float], seconds: float, events: int) -> dict[str, float]:
    ordered = sorted(latencies)

    def at(fraction: float) -> float:
        return ordered[max(0, int(len(ordered) * fraction) - 1)] if ordered else float("nan")

    return {
        "events_per_second": events / seconds,
        "received": len(ordered),
        "p50": statistics.median(ordered) if ordered else float("nan"),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": ordered[-1] if ordered else float("nan"),
    }


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    from driver.connection import ControlConnection
    from mosoo_core.event_feed import ThreadFeed

    threads = spec["threads"]
    emitted: dict[tuple[str, int], float] = {}
    received: dict[tuple[str, int], float] = {}
    drivers = [
        ControlConnection(
            control_url=f"unix://{spec['socket_path']}",
            driver_instance_id=t["instance_id"],
            boot_token=t["boot_token"],
            runtime="openai",
        )
        for t in threads
    ]
    running = [asyncio.create_task(driver.run()) for driver in drivers]
    await asyncio.wait_for(asyncio.gather(*(d.connected.wait() for d in drivers)), 60)

    async def view(thread: dict[str, str]) -> None:
        async with ThreadFeed(thread["account_id"], thread["session_id"]) as feed:
            async for batch in feed.follow(0):
                now = time.perf_counter()
                for event in batch:
                    number = event["payload"].get("n")
                    if number is not None:
                        received[(thread["session_id"], number)] = now

    viewers = [asyncio.create_task(view(t)) for t in threads]
    counters = dict.fromkeys((t["session_id"] for t in threads), 0)
    # This one process plays every driver and viewer, each a process of its own in use: its
    # full collections walked all their start-up objects at once, 100-200 ms with the GIL
    # held, and counted against control. Left out of collections, as control leaves its own.
    await asyncio.sleep(0.2)  # the viewers' first reads
    gc.collect()
    gc.freeze()

    def emit(index: int) -> None:
        thread = threads[index]
        key = (thread["session_id"], counters[thread["session_id"]])
        counters[thread["session_id"]] += 1
        emitted[key] = time.perf_counter()
        drivers[index].emit(thread["run_id"], "message.delta", {"text": "tok ", "n": key[1]})

    async def settled(keys: list[tuple[str, int]]) -> float:
        """Waits until every driver's events are acked; the moment they were."""
        while any(driver.unacked_count for driver in drivers):
            await asyncio.sleep(0.001)
        acked = time.perf_counter()
        deadline = time.monotonic() + 60
        while any(key not in received for key in keys) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return acked

    async def flood() -> dict[str, float]:
        started = time.perf_counter()
        for _ in range(spec["events"]):
            for index in range(len(threads)):
                emit(index)
            await asyncio.sleep(0)
        keys = list(emitted)
        acked = await settled(keys)
        latencies = [(received[k] - emitted[k]) * 1000 for k in keys if k in received]
        return _percentiles(latencies, acked - started, len(keys))

    async def paced() -> dict[str, float]:
        before = set(emitted)
        per_stream = spec["rate"] / len(threads)
        started = time.perf_counter()
        sent = 0
        while (elapsed := time.perf_counter() - started) < spec["seconds"]:
            due = int(per_stream * elapsed)
            for _ in range(due - sent):
                for index in range(len(threads)):
                    emit(index)
            sent = max(sent, due)
            await asyncio.sleep(TICK_SECONDS)
        keys = [k for k in emitted if k not in before]
        acked = await settled(keys)
        latencies = [(received[k] - emitted[k]) * 1000 for k in keys if k in received]
        return _percentiles(latencies, acked - started, len(keys))

    results: dict[str, Any] = {"flood": await flood(), "paced": await paced()}
    for viewer in viewers:
        viewer.cancel()
    await asyncio.gather(*viewers, return_exceptions=True)
    for driver in drivers:
        driver.stop()
    await asyncio.gather(*running, return_exceptions=True)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    results["load_cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return results


if __name__ == "__main__":
    main()
