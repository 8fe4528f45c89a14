"""What the model gateway adds to a streamed completion: direct against through Mosoo.

The scripted OpenAI-compatible server on loopback streams a short answer in N chunks with no
delay. (a) the bench asks it directly; (b) it asks the driver's real forwarder (in this
process, as it runs in the sandbox's driver) with a run's model grant: forwarder, control's
Unix socket, a real `mosoo control` process (SQLite in a temp dir, Redis
`db_number(13)`: MOSOO_TEST_REDIS_DB_OFFSET shifts it) checking the grant, putting in the
vaulted provider key, relaying to the server and recording the usage. The same streamed
`chat/completions` request either way (with the usage chunk the gateway asks for anyway),
turn about after warm-ups; prints time to the first content chunk and to the end of the
stream (p50, p95, p99), what (b) adds, the ratio, whether the added p50 is within 15 ms,
and control's resident memory at the end.

    .venv/bin/python bench/gateway.py [-n 200] [--chunks 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import redis  # noqa: E402

from driver.forwarder import Forwarder  # noqa: E402
from tests.support.openai_server import ScriptedOpenAIServer, TextTurn  # noqa: E402
from tests.support.redis_db import db_number  # noqa: E402

REDIS_DB = db_number(13)
MODEL = "m"
PROVIDER_KEY = "sk-bench-gateway"
GOAL_MS = 15.0  # issue 15: the gateway may add at most this much at the median


@dataclass(frozen=True)
class Sample:
    first_token: float  # seconds from sending the request to the first content chunk
    total: float  # seconds from sending the request to the end of the stream


def _percentile(samples: list[float], fraction: float) -> float:
    """Nearest rank (with 100 samples, p99 is the second slowest)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _content(line: str) -> str:
    """The text of one SSE line of a chat.completion.chunk stream ('' for anything else)."""
    if not line.startswith("data:") or line == "data: [DONE]":
        return ""
    choices = json.loads(line[5:]).get("choices") or [{}]
    return str(choices[0].get("delta", {}).get("content") or "")


async def _stream_once(
    client: httpx.AsyncClient, url: str, api_key: str, body: dict[str, Any], answer: str
) -> Sample:
    """One streamed completion, read line by line as an SDK reads it."""
    started = time.perf_counter()
    first_token: float | None = None
    text = []
    async with client.stream(
        "POST", url, json=body, headers={"Authorization": f"Bearer {api_key}"}
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {await response.aread()!r}")
        async for line in response.aiter_lines():
            if piece := _content(line):
                if first_token is None:
                    first_token = time.perf_counter()
                text.append(piece)
    ended = time.perf_counter()
    if first_token is None or "".join(text) != answer:
        raise RuntimeError(f"{url}: the stream did not carry the scripted answer")
    return Sample(first_token - started, ended - started)


async def _turn_about(
    rounds: int, warmups: int, *measures: Callable[[], Awaitable[Sample]]
) -> list[list[Sample]]:
    """Each measure once a round, in the reverse order every other round, so drift on a busy
    machine and going first or second touch every series alike; warm-up rounds not kept."""
    samples: list[list[Sample]] = [[] for _ in measures]
    pairs = list(zip(measures, samples, strict=True))
    for round_number in range(warmups + rounds):
        for measure, taken in pairs if round_number % 2 == 0 else reversed(pairs):
            sample = await measure()
            if round_number >= warmups:
                taken.append(sample)
    return samples


def _prepare(server: ScriptedOpenAIServer) -> tuple[str, str]:
    """An Agent on a provider key pointing at the scripted server, a thread with a queued run
    and a model grant for it, through the services: (grant, run id)."""
    from mosoo_core import agents, identity, sessions, vault
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade
    from mosoo_core.sessions import driver_plane
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
                name="Scripted",
                provider="openai_compatible",
                base_url=server.base_url,
                api_key=PROVIDER_KEY,
                models=[MODEL],
            ),
        )
        agent = agents.create_agent(db, account.id, app_id, name="bench gateway")
        agents.update_agent(
            db,
            account.id,
            app_id,
            agent.id,
            agents.AgentChanges(provider_credential_id=credential.id, model=MODEL),
        )
        thread = sessions.create_session(db, account.id, app_id, agent.id)
        sent = sessions.send_message(db, account.id, thread.id, "go")
        run = db.get(SessionRun, sent.run.id)
        assert run is not None
        grant = driver_plane.issue_model_grant(
            db, run, credential_id=credential.id, allowed_models=[MODEL]
        )
        return grant, run.id


def _usage_records(run_id: str) -> int:
    from sqlmodel import func, select

    from mosoo_core.db import session_scope
    from mosoo_core.tables.usage import UsageEvent

    with session_scope() as db:
        return int(db.exec(select(func.count()).where(UsageEvent.run_id == run_id)).one())


def _rss_mib(pid: int) -> float:
    try:
        import psutil

        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


async def _bench(
    server: ScriptedOpenAIServer,
    socket_path: Path,
    grant: str,
    rounds: int,
    warmups: int,
    chunks: int,
) -> tuple[list[Sample], list[Sample]]:
    pieces = [f"word{index} " for index in range(chunks)]
    answer = "".join(pieces)
    body = {
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Say a few words."}],
    }
    forwarder = Forwarder(f"unix://{socket_path}")
    await forwarder.start()
    try:
        async with (
            httpx.AsyncClient(trust_env=False, timeout=30) as direct_client,
            httpx.AsyncClient(trust_env=False, timeout=30) as gateway_client,
        ):

            async def direct() -> Sample:
                server.add(TextTurn(pieces))
                url = f"{server.base_url}/chat/completions"
                return await _stream_once(direct_client, url, PROVIDER_KEY, body, answer)

            async def through_gateway() -> Sample:
                server.add(TextTurn(pieces))
                url = f"{forwarder.gateway_url}/openai/v1/chat/completions"
                return await _stream_once(gateway_client, url, grant, body, answer)

            direct_samples, gateway_samples = await _turn_about(
                rounds, warmups, direct, through_gateway
            )
        # Let the forwarder read the clients' EOF first: on Python 3.11 cancelling an idle
        # connection's task in close() logs a spurious CancelledError traceback.
        await asyncio.sleep(0.2)
    finally:
        await forwarder.close()
    return direct_samples, gateway_samples


def _report(label: str, direct: list[float], gateway: list[float]) -> bool:
    """Print one figure's rows (ms); whether its added p50 is within the goal."""
    a, b = ([_percentile(s, f) * 1000 for f in (0.5, 0.95, 0.99)] for s in (direct, gateway))
    added = [y - x for x, y in zip(a, b, strict=True)]
    print(label)
    for name, row, form in (
        ("(a) direct to the server", a, "{:9.2f}"),
        ("(b) forwarder + control gateway", b, "{:9.2f}"),
        ("added (b) - (a)", added, "{:9.2f}"),
        ("ratio (b) / (a)", [y / x for x, y in zip(a, b, strict=True)], "{:8.2f}x"),
    ):
        print(f"    {name:<34}" + "".join(form.format(value) for value in row))
    return added[0] <= GOAL_MS


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=200, help="measured rounds (one (a), one (b))")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks in the answer")
    parser.add_argument("--warmups", type=int, default=10, help="unmeasured rounds first")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="mosoo-bench-gateway-"))
    os.environ.update(
        {
            "MOSOO_DATA_DIR": str(scratch),
            "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
            "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
            "MOSOO_CONTROL_PORT": "0",
            "MOSOO_LOG_LEVEL": "WARNING",
            "MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS": "true",  # the scripted server is on loopback
        }
    )
    from mosoo_core.settings import get_settings, reset_settings_cache

    reset_settings_cache()
    redis.Redis(db=REDIS_DB).flushdb()
    server = ScriptedOpenAIServer(models=[MODEL], api_key=PROVIDER_KEY).start()
    control: subprocess.Popen[bytes] | None = None
    try:
        grant, run_id = _prepare(server)
        control = subprocess.Popen(
            [sys.executable, "-m", "mosoo_core.cli", "control"],
            cwd=ROOT,
            env={**os.environ},
            start_new_session=True,
        )
        socket_path = get_settings().resolved_control_socket
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            if time.monotonic() > deadline or control.poll() is not None:
                raise SystemExit("control did not start")
            time.sleep(0.05)
        direct, gateway = asyncio.run(
            _bench(server, socket_path, grant, args.n, args.warmups, args.chunks)
        )
        calls = args.n + args.warmups
        deadline = time.monotonic() + 10
        while (recorded := _usage_records(run_id)) < calls and time.monotonic() < deadline:
            time.sleep(0.1)
        print(
            f"streamed chat/completions, {args.chunks} content chunks, no delay; {args.n} rounds "
            f"turn about after {args.warmups} warm-up rounds; {os.cpu_count()} cores"
        )
        print(f"{'ms':<38}{'p50':>9}{'p95':>9}{'p99':>9}")
        first_met = _report(
            "time to first content chunk",
            [s.first_token for s in direct],
            [s.first_token for s in gateway],
        )
        total_met = _report(
            "time to the end of the stream", [s.total for s in direct], [s.total for s in gateway]
        )
        print(
            f"goal, added p50 at most {GOAL_MS:.0f} ms: first token "
            f"{'met' if first_met else 'NOT met'}, total {'met' if total_met else 'NOT met'}"
        )
        print(f"usage records written by the gateway: {recorded} of {calls} calls")
        print(f"control process RSS at the end: {_rss_mib(control.pid):.1f} MiB")
    finally:
        if control is not None:
            control.terminate()
            try:
                control.wait(20)
            except subprocess.TimeoutExpired:
                control.kill()
                control.wait(10)
        server.stop()
        redis.Redis(db=REDIS_DB).flushdb()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
