"""Footprint: what an idle driver and a control holding many drivers keep in memory, and what
the driver's own start costs before it can dial control.

    .venv/bin/python bench/footprint.py [-n 7] [--drivers 200] [--hold 25] [--baseline DIR]
    .venv/bin/python bench/footprint.py --parts control      # only (b); or idle, start, assistant

(a) idle driver, per runtime (`openai`, `claude`, `acp`): a real boot on the real sandbox image
against a real `mosoo control` (the run's frozen payload from `plan_boot`, the sandbox from
`sandbox_for`, `mosoo-driver` started in it), booted with its run (as an Assistant's driver is)
or standing by (the same payload without the run: a warm pool member, a cold Task start before
`assign`), until `ready` and then idle (its CPU time and its children's unchanged for a
second): RSS, PSS and USS of the driver process, read from the host's /proc (a sandbox is
only processes of the host), and of the processes it started (the `acp` runtime's agent,
OpenCode, starts with a driver that has its run).
(b) control with N simulated drivers (hello, welcome, ready, then heartbeats at the interval
welcome gives, over the Unix socket as `bench/events.py` plays them): control's RSS/PSS/USS
idle after start, then with all N connected, the largest figure seen over `--hold` seconds,
and control's CPU use meanwhile.
(c) the driver's start, per runtime, inside a sandbox of the image: from spawning
`python -m driver.main` (the boot payload pointing at a Unix socket the probe listens on) to
its connection to that socket, i.e. interpreter start, imports, forwarder and backend set-up,
until it dials; then the same for a driver booted standby (its payload without a run: a
cold Task start, whose run comes as `assign` after hello, and a warm pool member); the median and p95 of `-n` starts, then one start under `-X importtime`: the
import time by package (self time, summed); and what importing the runtime's SDK alone takes
in a fresh interpreter there (the first run pays it, in a thread: `openai`, `claude`; the
`acp` agent's start in the background after `ready`).

(d) an Assistant (Pet, `openai`) after `--messages` messages in one thread, each run dispatched
and finished as the worker does: how many driver processes its sandbox still holds, and
their memory (each run boots a driver of its own there, stopped once its run is over).

`--baseline DIR`: DIR holds a `driver/` package of another revision (for example
`git archive HEAD~3 driver | tar -x -C DIR`); it is copied into the same kind of sandbox and
measured turn about with the image's own driver in (a) and (c), so before and after come from
one run. It must speak a protocol version this control accepts.

Goals (issue 15): an idle driver at most 50 MB RSS; control at most 200 MB RSS holding 200
drivers. SQLite in a temp dir; Redis `db_number(11)` (MOSOO_TEST_REDIS_DB_OFFSET shifts it).
Every sandbox and process started here is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import math
import os
import statistics
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.redis_db import db_number  # noqa: E402

REDIS_DB = db_number(11)
RUNTIMES = ("openai", "claude", "acp")
DRIVER_GOAL_MB = 50
CONTROL_GOAL_MB = 200
MB = 1_000_000
SANDBOX_PYTHON = "/opt/mosoo/venv/bin/python"
IMAGE_ROOT = "/opt/mosoo"  # where the image's own driver package lives (its PYTHONPATH)
BASELINE_ROOT = "/tmp/mosoo-baseline"  # where --baseline's copy goes inside a sandbox
IDLE_QUIET_SECONDS = 1.0
PROBE_TEMPLATE = "/tmp/mosoo-probe-template.json"
# What each runtime imports at its first use (the first run; acp: its agent's start).
RUNTIME_SDKS = {
    "openai": ["openai"],
    "claude": ["claude_agent_sdk"],
    "acp": ["acp", "acp.schema", "acp.client.connection"],
}
# Times those imports in a fresh interpreter of the sandbox; prints the seconds.
SDK_PROBE = (
    "import importlib, sys, time; started = time.perf_counter(); "
    "[importlib.import_module(name) for name in sys.argv[1:]]; "
    "print(time.perf_counter() - started)"
)

# Runs inside a sandbox with its Python: spawn the driver with a payload whose control is a
# socket we listen on, and time the spawn to the driver's first connection. argv: the driver's
# PYTHONPATH root, "1" for -X importtime, "1" for a standby payload (the template's without its
# execution spec). Prints JSON {seconds, importtime}.
PROBE = r"""
import json, os, socket, subprocess, sys, time
root, importtime, standby = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
probe, payload, errors = "/tmp/mosoo-probe.sock", "/tmp/mosoo-probe-payload.json", "/tmp/mosoo-probe.err"
with open("/tmp/mosoo-probe-template.json") as template:
    data = json.load(template)
data["control_url"] = "unix://" + probe
if standby:
    data.pop("execution_spec")
fd = os.open(payload, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as out:
    json.dump(data, out)
if os.path.exists(probe):
    os.unlink(probe)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(probe)
server.listen(1)
server.settimeout(60)
env = {**os.environ, "MOSOO_DRIVER_BOOT_PAYLOAD_FILE": payload, "PYTHONPATH": root}
argv = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "driver.main"]
with open(errors, "wb") as stderr:
    started = time.perf_counter()
    driver = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    connection, _ = server.accept()
    seconds = time.perf_counter() - started
driver.kill()
driver.wait()
connection.close()
server.close()
with open(errors, errors="replace") as stderr:
    text = stderr.read()
print(json.dumps({"seconds": seconds, "importtime": text if importtime else ""}))
"""


# --- memory and CPU of processes, from /proc ----------------------------------------------


@dataclass(frozen=True)
class Memory:
    rss: int  # bytes resident
    pss: int  # shared pages split among their users
    uss: int  # private pages: what ending the process would free

    def __add__(self, other: Memory) -> Memory:
        return Memory(self.rss + other.rss, self.pss + other.pss, self.uss + other.uss)

    def line(self) -> str:
        return (
            f"RSS {self.rss / MB:6.1f} MB  PSS {self.pss / MB:6.1f} MB  USS {self.uss / MB:6.1f} MB"
        )


NO_MEMORY = Memory(0, 0, 0)


def memory_of(pid: int) -> Memory:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) * 1024
    return Memory(fields["Rss"], fields["Pss"], fields["Private_Clean"] + fields["Private_Dirty"])


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces): state is [0]."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, theirs, ...)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                children[int(_stat(int(entry.name))[1])].append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = _stat(pid)
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def wait_idle(pid: int, timeout: float = 60) -> None:
    """Until `pid` and everything it started have used no CPU for IDLE_QUIET_SECONDS."""
    deadline = time.monotonic() + timeout
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        ticks = cpu_ticks([pid, *descendants(pid)])
        if ticks != last:
            last, quiet_since = ticks, time.monotonic()
        elif time.monotonic() - quiet_since >= IDLE_QUIET_SECONDS:
            return
        time.sleep(0.1)
    raise TimeoutError(f"process {pid} did not settle in {timeout:.0f} s")


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _verdict(value_mb: float, goal_mb: float) -> str:
    return f"goal <= {goal_mb:.0f} MB: {'met' if value_mb <= goal_mb else 'NOT met'}"


# --- the stack: settings, a control process, Agents ----------------------------------------


@dataclass(frozen=True)
class Stack:
    scratch: Path
    owners: dict[str, Any]  # runtime -> tests.support.stack.Owner of a Task Agent
    assistant: Any  # the Owner of an Assistant (Pet) Agent on the openai runtime


def _stack(scratch: Path, image: str, openai_url: str, anthropic_url: str, key: str) -> Stack:
    """Settings for this process and the control processes it starts (set before mosoo_core
    reads them), and per runtime an owner with a Task Agent on the scripted model servers."""
    os.environ.update(
        {
            "MOSOO_DATA_DIR": str(scratch / "data"),
            "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
            "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
            "MOSOO_CONTROL_PORT": "0",
            "MOSOO_LOG_LEVEL": "WARNING",
            "MOSOO_SANDBOX_IMAGE": image,
            "MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS": "true",  # the scripted model servers
        }
    )
    from mosoo_core.db import get_engine
    from mosoo_core.migrations import upgrade
    from mosoo_core.settings import reset_settings_cache
    from tests.support.stack import make_agent

    reset_settings_cache()
    upgrade()
    owners = {
        runtime: make_agent(
            get_engine(),
            anthropic_url if runtime == "claude" else openai_url,
            key,
            email=f"{runtime}@example.com",
            runtime=runtime,
        )
        for runtime in RUNTIMES
    }
    assistant = make_agent(get_engine(), openai_url, key, email="pet@example.com", kind="pet")
    return Stack(scratch, owners, assistant)


@contextlib.contextmanager
def control_process(stack: Stack, name: str) -> Iterator[int]:
    """A real `mosoo control`, its pid once its socket answers."""
    from mosoo_core.settings import get_settings
    from tests.support.processes import running, wait_for

    socket_path = get_settings().resolved_control_socket
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    with running(["control"], {**os.environ}, stack.scratch / f"{name}.log") as process:
        wait_for(socket_path.exists, 30, "control's socket", process)
        yield process.pid


def _boot_plan(stack: Stack, runtime: str) -> Any:
    """A new thread of the runtime's Agent with one message, its run's frozen boot plan."""
    from mosoo_core import sessions
    from mosoo_core.db import session_scope
    from mosoo_core.runtime import runs

    owner = stack.owners[runtime]
    with session_scope() as db:
        thread = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id)
        run_id = sessions.send_message(db, owner.account_id, thread.id, "hi").run.id
    with session_scope() as db:
        plan, _ = runs.plan_boot(db, run_id)
    assert plan is not None, f"the {runtime} run was not planned"
    return plan


def _put_baseline(backend: Any, ref: Any, baseline: Path) -> None:
    """--baseline's driver/ into the sandbox, compiled as the image compiles its own."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(baseline / "driver", arcname="driver", filter=_no_caches)
    backend.put_archive(ref, BASELINE_ROOT, buffer.getvalue())
    result = backend.exec(ref, [SANDBOX_PYTHON, "-m", "compileall", "-q", BASELINE_ROOT])
    if result.exit_code != 0:
        raise RuntimeError(f"compiling the baseline failed: {result.stderr_text[:500]}")


def _no_caches(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if "__pycache__" in info.name or info.name.endswith(".pyc") else info


# --- (a) an idle driver per runtime ---------------------------------------------------------


def _driver_pids(container_id: str) -> list[int]:
    """The host pids of every driver process in the sandbox."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if container_id in (entry / "cgroup").read_text() and b"driver.main" in (
                    entry / "cmdline"
                ).read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def _driver_pid(container_id: str, timeout: float = 30) -> int:
    """The host pid of the sandbox's (one) driver process, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pids := _driver_pids(container_id):
            return pids[0]
        time.sleep(0.05)
    raise TimeoutError("no driver process in the sandbox")


@dataclass(frozen=True)
class IdleDriver:
    driver: Memory
    children: Memory
    child_names: tuple[str, ...]
    ready_seconds: float  # start of the driver process to `ready`


def _standby(payload_json: str) -> bytes:
    """The boot payload without its run: what a warm pool member (and a cold Task start's
    driver) boots with."""
    payload = json.loads(payload_json)
    payload.pop("execution_spec", None)
    return json.dumps(payload).encode()


def _is_ready(instance_id: str) -> bool:
    from mosoo_core.db import session_scope
    from mosoo_core.tables.sessions import DriverInstance

    with session_scope() as db:
        instance = db.get(DriverInstance, instance_id)
        # A standby driver's ready sets standby_at (protocol 2), a driver with its run ready_at.
        return instance is not None and bool(instance.ready_at or instance.standby_at)


def idle_driver(
    stack: Stack, backend: Any, runtime: str, standby: bool, baseline: Path | None = None
) -> IdleDriver:
    """Boot the runtime's driver with its run's payload (or the standby one) in a new sandbox
    (the image's driver, or --baseline's in the same image), wait for ready and then for
    idle, and read its memory."""
    from mosoo_core.runtime import runs
    from mosoo_core.runtime.sandbox import BOOT_PAYLOAD

    plan = _boot_plan(stack, runtime)
    ref, _ = runs.sandbox_for(backend, plan)
    try:
        payload = _standby(plan.payload_json) if standby else plan.payload_json.encode()
        backend.put_file(ref, BOOT_PAYLOAD, payload, mode=0o600)
        started = time.perf_counter()
        if baseline is None:
            backend.start_driver(ref)
        else:
            _put_baseline(backend, ref, baseline)
            started = time.perf_counter()
            backend.start_process(
                ref,
                [SANDBOX_PYTHON, "-m", "driver.main"],
                env={"MOSOO_DRIVER_BOOT_PAYLOAD_FILE": BOOT_PAYLOAD, "PYTHONPATH": BASELINE_ROOT},
            )
        deadline = time.monotonic() + 60
        while not _is_ready(plan.instance_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {runtime} driver did not say ready in 60 s")
            time.sleep(0.02)
        ready_seconds = time.perf_counter() - started
        pid = _driver_pid(ref.id)
        wait_idle(pid)
        children = descendants(pid)
        names = tuple(sorted(Path(f"/proc/{c}/comm").read_text().strip() for c in children))
        child_memory = sum((memory_of(c) for c in children), NO_MEMORY)
        return IdleDriver(memory_of(pid), child_memory, names, ready_seconds)
    finally:
        backend.remove(ref)


def _print_idle(label: str, samples: list[IdleDriver]) -> None:
    """Medians of each figure over the samples."""

    def median(pick: Callable[[IdleDriver], int]) -> int:
        return int(statistics.median(pick(s) for s in samples))

    driver = Memory(
        median(lambda s: s.driver.rss),
        median(lambda s: s.driver.pss),
        median(lambda s: s.driver.uss),
    )
    children = Memory(
        median(lambda s: s.children.rss),
        median(lambda s: s.children.pss),
        median(lambda s: s.children.uss),
    )
    ready = statistics.median(s.ready_seconds for s in samples) * 1000
    print(f"    {label:<32} {driver.line()}   {_verdict(driver.rss / MB, DRIVER_GOAL_MB)}")
    if children.rss:
        names = ", ".join(sorted(set(samples[0].child_names)))
        print(f"    {'  its children (' + names + ')':<32} {children.line()}")
    print(f"    {'':<32} start (docker exec) to ready: median {ready:.0f} ms")


# --- (d) an Assistant's sandbox after some messages -------------------------------------------


def assistant_after(stack: Stack, backend: Any, model: Any, messages: int) -> list[Memory]:
    """Send `messages` messages in turn to one thread of an Assistant (each run dispatched and
    finished as the worker does, answered by the scripted model), then read the memory of
    every driver process its sandbox still holds."""
    from mosoo_core import sessions
    from mosoo_core.db import session_scope
    from mosoo_core.runtime import runs
    from mosoo_core.runtime.labels import installation_label
    from mosoo_core.runtime.sandbox._base import LABEL_SUBJECT
    from mosoo_core.tables.sessions import TERMINAL_RUN_STATUSES, SessionRun
    from tests.support.openai_server import TextTurn

    owner = stack.assistant
    with session_scope() as db:
        thread_id = sessions.create_session(db, owner.account_id, owner.app_id, owner.agent_id).id
    for number in range(messages):
        model.add(TextTurn(f"Noted, message {number + 1}."))
        with session_scope() as db:
            run_id = sessions.send_message(db, owner.account_id, thread_id, "hi").run.id
        runs.dispatch_run(run_id, backend)
        deadline = time.monotonic() + 120
        while True:
            with session_scope() as db:
                run = db.get(SessionRun, run_id)
                if run is not None and run.status in TERMINAL_RUN_STATUSES:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Assistant's run {number + 1} did not end")
            time.sleep(0.05)
        runs.finish_run_sandbox(run_id, backend)
    [ref] = backend.list_by_label(
        {LABEL_SUBJECT: f"agent:{owner.agent_id}", **installation_label()}
    )
    try:
        # A finished run's driver is told to stop: give the last one time to exit.
        deadline = time.monotonic() + 15
        while _driver_pids(ref.id) and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = _driver_pids(ref.id)
        for pid in pids:
            wait_idle(pid)
        return [memory_of(pid) for pid in pids if Path(f"/proc/{pid}").exists()]
    finally:
        backend.remove(ref)


# --- (b) control holding N drivers ------------------------------------------------------------


def _register(stack: Stack, count: int) -> list[tuple[str, str]]:
    """N drivers about to boot: (instance id, boot token). Their tokens last 60 s."""
    from mosoo_core.db import session_scope
    from mosoo_core.sessions import driver_plane

    with session_scope() as db:
        return [
            (new.instance_id, new.boot_token)
            for new in (
                driver_plane.register_driver(
                    db,
                    app_id=stack.owners["openai"].app_id,
                    subject=f"session:footprint-{i}",
                    runtime="openai",
                )
                for i in range(count)
            )
        ]


async def _simulated_driver(
    socket_path: str, instance_id: str, token: str, ready: asyncio.Event, stop: asyncio.Event
) -> int:
    """hello, welcome, ready, then a heartbeat every interval until `stop`; returns the
    heartbeats sent."""
    import websockets

    def now() -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    async with websockets.unix_connect(socket_path, uri="ws://control/driver/socket") as ws:
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "driver_instance_id": instance_id,
                    "boot_token": token,
                    "protocol_version": _protocol_version(),
                    "driver_version": "bench",
                    "runtime": "openai",
                    "capabilities": [],
                    "pid": os.getpid(),
                }
            )
        )
        welcome = json.loads(await ws.recv())
        if welcome.get("type") != "welcome":
            raise RuntimeError(f"control refused a simulated driver: {welcome}")
        await ws.send(json.dumps({"type": "ready", "at": now()}))
        ready.set()
        interval = welcome["heartbeat_interval_ms"] / 1000
        beats = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if not stop.is_set():
                await ws.send(json.dumps({"type": "heartbeat", "at": now()}))
                beats += 1
        return beats


def _protocol_version() -> int:
    from driver.protocol import PROTOCOL_VERSION

    return PROTOCOL_VERSION


@dataclass(frozen=True)
class ControlFootprint:
    idle: Memory
    connected: Memory  # just after the last driver said ready
    peak: Memory  # the largest RSS seen while holding them
    held_seconds: float
    cpu_percent: float  # control's CPU while holding them, of one core
    heartbeats: int


async def _hold(
    socket_path: str, drivers: list[tuple[str, str]], pid: int, hold: float
) -> tuple[Memory, Memory, float, float, int]:
    stop = asyncio.Event()
    readies = [asyncio.Event() for _ in drivers]
    tasks = [
        asyncio.create_task(_simulated_driver(socket_path, i, t, r, stop))
        for (i, t), r in zip(drivers, readies, strict=True)
    ]
    deadline = time.monotonic() + 120
    while not all(r.is_set() for r in readies):
        for task in tasks:
            if task.done():
                task.result()  # a driver that ended already: its error
        if time.monotonic() > deadline:
            raise TimeoutError("not every simulated driver said ready within 120 s")
        await asyncio.sleep(0.05)
    connected = peak = memory_of(pid)
    ticks, started = cpu_ticks([pid]), time.monotonic()
    while time.monotonic() - started < hold:
        await asyncio.sleep(0.5)
        sample = memory_of(pid)
        peak = sample if sample.rss > peak.rss else peak
        for task in tasks:
            if task.done():
                task.result()
    held = time.monotonic() - started
    cpu = (cpu_ticks([pid]) - ticks) / os.sysconf("SC_CLK_TCK") / held * 100
    stop.set()
    beats = sum(await asyncio.gather(*tasks))
    return connected, peak, held, cpu, beats


def control_footprint(stack: Stack, count: int, hold: float) -> ControlFootprint:
    from mosoo_core.settings import get_settings

    with control_process(stack, "control-footprint") as pid:
        socket_path = str(get_settings().resolved_control_socket)
        # One driver first, so what the first connection loads (lazily) counts as idle.
        asyncio.run(_hold(socket_path, _register(stack, 1), pid, 0))
        wait_idle(pid)
        idle = memory_of(pid)
        connected, peak, held, cpu, beats = asyncio.run(
            _hold(socket_path, _register(stack, count), pid, hold)
        )
    return ControlFootprint(idle, connected, peak, held, cpu, beats)


# --- (c) the driver's start --------------------------------------------------------------------


def _probe(
    backend: Any, ref: Any, root: str, importtime: bool = False, standby: bool = False
) -> dict[str, Any]:
    flags = ["1" if importtime else "0", "1" if standby else "0"]
    result = backend.exec(ref, [SANDBOX_PYTHON, "-c", PROBE, root, *flags], timeout=120)
    if result.exit_code != 0:
        raise RuntimeError(f"the start probe failed: {result.stderr_text[-2000:]}")
    answer: dict[str, Any] = json.loads(result.stdout_text.strip().splitlines()[-1])
    return answer


def import_breakdown(text: str) -> dict[str, float]:
    """-X importtime's self times (ms) summed by package: the top-level name, or the module
    itself for the driver's own."""
    groups: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line[len("import time:") :].split("|", 2)
        module = name.strip()
        key = module if module.startswith("driver") else module.split(".")[0]
        groups[key] += int(self_us) / 1000
    return dict(groups)


@dataclass(frozen=True)
class StartFigures:
    seconds: dict[str, list[float]]  # "image" / "baseline" -> start-to-dial samples
    imports: dict[str, dict[str, float]]  # the same keys -> import_breakdown
    sdk_seconds: list[float]  # importing the runtime's SDK, which the first use now pays


def driver_start(
    stack: Stack,
    backend: Any,
    runtime: str,
    runs_count: int,
    baseline: Path | None,
    standby: bool = False,
) -> StartFigures:
    from mosoo_core.runtime import runs

    plan = _boot_plan(stack, runtime)
    ref, _ = runs.sandbox_for(backend, plan)
    try:
        backend.put_file(ref, PROBE_TEMPLATE, plan.payload_json.encode(), mode=0o600)
        roots = {"image": IMAGE_ROOT}
        if baseline is not None:
            _put_baseline(backend, ref, baseline)
            roots["baseline"] = BASELINE_ROOT
        for root in roots.values():
            _probe(backend, ref, root, standby=standby)  # warm-up: the page cache
        seconds: dict[str, list[float]] = {name: [] for name in roots}
        order = list(roots.items())
        for round_number in range(runs_count):
            for name, root in order if round_number % 2 == 0 else reversed(order):
                seconds[name].append(_probe(backend, ref, root, standby=standby)["seconds"])
        imports = {
            name: import_breakdown(
                _probe(backend, ref, root, importtime=True, standby=standby)["importtime"]
            )
            for name, root in roots.items()
        }
        if standby:  # it imports no runtime before dialing: no SDK figure of its own
            return StartFigures(seconds, imports, [])
        sdk = [
            float(
                backend.exec(ref, [SANDBOX_PYTHON, "-c", SDK_PROBE, *RUNTIME_SDKS[runtime]])
                .stdout_text.strip()
                .splitlines()[-1]
            )
            for _ in range(runs_count)
        ]
        return StartFigures(seconds, imports, sdk)
    finally:
        backend.remove(ref)


def _print_start(runtime: str, figures: StartFigures) -> None:
    for name, samples in figures.seconds.items():
        print(
            f"    {runtime + ' (' + name + ')':<24} start to dial: median "
            f"{statistics.median(samples) * 1000:6.0f} ms   p95 {_p95(samples) * 1000:6.0f} ms"
        )
    if "baseline" in figures.seconds:
        ratio = statistics.median(figures.seconds["image"]) / statistics.median(
            figures.seconds["baseline"]
        )
        print(f"    {'':<24} ratio image / baseline: {ratio:.2f}x")
    if figures.sdk_seconds:
        print(
            f"    {'':<24} its SDK ({', '.join(RUNTIME_SDKS[runtime])}) imported alone: median "
            f"{statistics.median(figures.sdk_seconds) * 1000:.0f} ms (at its first use, in a thread)"
        )
    names = list(figures.imports)
    totals = {name: sum(figures.imports[name].values()) for name in names}
    header = "".join(f"{name:>10}" for name in names)
    print(f"    {'':<24} imports by package, self ms {header}")
    top = sorted(
        {key for breakdown in figures.imports.values() for key in breakdown},
        key=lambda key: -max(b.get(key, 0.0) for b in figures.imports.values()),
    )[:12]
    for key in top:
        row = "".join(f"{figures.imports[name].get(key, 0.0):10.0f}" for name in names)
        print(f"    {'':<24}   {key:<38}{row}")
    print(f"    {'':<24}   {'all imports':<38}" + "".join(f"{totals[n]:10.0f}" for n in names))


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--runs", type=int, default=7, help="starts per series in (c)")
    parser.add_argument("--idle-runs", type=int, default=3, help="boots per runtime in (a)")
    parser.add_argument("--drivers", type=int, default=200, help="simulated drivers in (b)")
    parser.add_argument("--hold", type=float, default=25.0, help="seconds (b) holds them")
    parser.add_argument("--messages", type=int, default=3, help="messages to the Assistant in (d)")
    parser.add_argument(
        "--parts",
        nargs="*",
        choices=("idle", "control", "start", "assistant"),
        default=["idle", "control", "start", "assistant"],
    )
    parser.add_argument(
        "--baseline", type=Path, help="a folder holding driver/ of another revision"
    )
    arguments = parser.parse_args()
    if arguments.baseline is not None and not (arguments.baseline / "driver" / "main.py").exists():
        parser.error(f"{arguments.baseline} holds no driver/main.py")

    import docker
    import redis

    from mosoo_core.runtime.sandbox.docker_backend import DockerBackend
    from tests.support.anthropic_server import ScriptedAnthropicServer
    from tests.support.openai_server import ScriptedOpenAIServer

    backend = DockerBackend(docker.from_env(timeout=600))
    image = backend.image  # built (or found) before anything is measured
    key = "sk-bench-footprint"
    redis.Redis(db=REDIS_DB).flushdb()
    with (
        tempfile.TemporaryDirectory(prefix="mosoo-bench-footprint-") as scratch,
        ScriptedOpenAIServer(api_key=key) as openai_model,
        ScriptedAnthropicServer(models=["claude-test"], api_key=key) as anthropic_model,
    ):
        Path(scratch).chmod(0o755)
        stack = _stack(Path(scratch), image, openai_model.base_url, anthropic_model.base_url, key)
        try:
            _run(stack, backend, openai_model, arguments)
        finally:
            from mosoo_core.runtime.labels import installation_label

            for ref in backend.list_by_label(installation_label()):
                backend.remove(ref)
            redis.Redis(db=REDIS_DB).flushdb()


def _idle_series(stack: Stack, backend: Any, runs_count: int, baseline: Path | None) -> None:
    print(
        "(a) an idle driver after ready, per runtime, booted with its run or standing by "
        f"(medians of {runs_count} boots, turn about)"
    )
    for runtime in RUNTIMES:
        for standby in (False, True):
            samples: dict[str, list[IdleDriver]] = {"image": []}
            if baseline is not None:
                samples["baseline"] = []
            for round_number in range(runs_count):
                for name in list(samples) if round_number % 2 == 0 else reversed(list(samples)):
                    source = baseline if name == "baseline" else None
                    samples[name].append(idle_driver(stack, backend, runtime, standby, source))
            shape = "standby" if standby else "with run"
            for name, taken in samples.items():
                _print_idle(f"{runtime}, {shape} ({name})", taken)


def _run(stack: Stack, backend: Any, model: Any, arguments: argparse.Namespace) -> None:
    baseline: Path | None = arguments.baseline
    print(f"image {backend.image}; load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    if "control" in arguments.parts:
        figures = control_footprint(stack, arguments.drivers, arguments.hold)
        print(f"(b) one control process, {arguments.drivers} simulated drivers connected")
        print(f"    idle                   {figures.idle.line()}")
        print(f"    all connected, ready   {figures.connected.line()}")
        print(
            f"    largest over {figures.held_seconds:.0f} s      {figures.peak.line()}   "
            f"{_verdict(figures.peak.rss / MB, CONTROL_GOAL_MB)}"
        )
        per_driver = (figures.peak.rss - figures.idle.rss) / arguments.drivers / 1000
        print(
            f"    per driver: {per_driver:.0f} kB RSS; control's CPU while holding them: "
            f"{figures.cpu_percent:.0f}% of a core ({figures.heartbeats} heartbeats)"
        )
    if {"idle", "start", "assistant"} & set(arguments.parts):
        # Sandboxes mount control's socket folder: it has to be there, even for (c).
        with control_process(stack, "control-drivers"):
            if "assistant" in arguments.parts:
                drivers = assistant_after(stack, backend, model, arguments.messages)
                total = sum(drivers, NO_MEMORY)
                print(
                    f"(d) an Assistant's sandbox after {arguments.messages} messages in one "
                    f"thread (openai): {len(drivers)} driver processes, together {total.line()}"
                )
                for memory in drivers:
                    print(f"    one driver             {memory.line()}")
            if "idle" in arguments.parts:
                _idle_series(stack, backend, arguments.idle_runs, baseline)
            if "start" in arguments.parts:
                print(
                    f"(c) the driver's start to dial, in a sandbox ({arguments.runs} starts, "
                    "turn about)"
                )
                for runtime in RUNTIMES:
                    start = driver_start(stack, backend, runtime, arguments.runs, baseline)
                    _print_start(runtime, start)
                standby = driver_start(stack, backend, "openai", arguments.runs, baseline, True)
                _print_start("standby", standby)
    print(f"load at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")


if __name__ == "__main__":
    main()
