"""How long a sandbox takes to start, against the floor Docker itself sets.

    .venv/bin/python bench/sandbox_start.py [-n 10]

(a) bare `docker run --rm <image> true` through the SDK; (b) our docker backend: create,
exec `true`, remove; (c) for comparison, the process backend doing the same; (d) Mosoo's
request-to-driver-ready against a real `mosoo control`: freeze the run, create the
sandbox (cold Cattle) or reuse the Agent's (warm Pet), write the boot payload, start the
driver, until it has said hello and ready; (f) the same cold Cattle bound to an environment
(a setup script, a secret variable, the `limited` network with its egress listener), as a
ratio to (d); (g) the same cold Cattle with a built environment (one pip and one npm package,
its layer mounted read-only), measured turn about with (d) and as a ratio to it (the goal:
within 10%); (h) how long the build
of those packages takes, from the test package indexes on loopback through the egress proxy;
(i) for each runtime (`openai`, `claude`, `acp` = OpenCode), measured turn about, a cold
Cattle run through `dispatch_run` (the worker's own code): request to driver ready, and
request to the first `agent.message.delta` of a plain text answer from the scripted model
servers on loopback (through control's gateway); (j) one image for all runtimes or one per
runtime: the image against `mosoo-sandbox:bench-base`, built from the same Dockerfile
without the Claude Code (claude-agent-sdk) and OpenCode payload, their sizes, and turn about
on both: bare `docker run` and request to driver ready (openai). The base image is removed
at the end unless --keep-base-image (then the next run reuses it).
Each series gets one unmeasured warm-up run. Everything else created is removed. Redis db
`db_number(7)` (tests/support/redis_db.py: MOSOO_TEST_REDIS_DB_OFFSET shifts it).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from mosoo_core.runtime.sandbox import SandboxBackend, SandboxSpec  # noqa: E402
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend  # noqa: E402
from mosoo_core.runtime.sandbox.process_backend import ProcessBackend  # noqa: E402

LABELS = {"mosoo.test": "1", "mosoo.bench": "sandbox_start"}
RUNTIMES = ("openai", "claude", "acp")
BASE_IMAGE_TAG = "mosoo-sandbox:bench-base"
Figures = tuple[float, ...]
_PROCESSES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"


def _p95(samples: list[float]) -> float:
    """Nearest-rank 95th percentile (with 10 samples: the slowest)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _turn_about(runs: int, *measures: Callable[[], Figures]) -> list[list[Figures]]:
    """Series measured turn about, so drift on a noisy machine touches all alike, in the
    reverse order every other round (going first or after another is no advantage); each
    `measure` returns its own figures (seconds) and gets one unmeasured warm-up run first."""
    for measure in measures:
        measure()  # warm-up: caches, first-use costs
    samples: list[list[Figures]] = [[] for _ in measures]
    pairs = list(zip(measures, samples, strict=True))
    for round_number in range(runs):
        for measure, taken in pairs if round_number % 2 == 0 else reversed(pairs):
            taken.append(measure())
    return samples


def _timed(once: Callable[[], None]) -> Callable[[], Figures]:
    def measure() -> Figures:
        started = time.perf_counter()
        once()
        return (time.perf_counter() - started,)

    return measure


def _interleaved(runs: int, *once: Callable[[], None]) -> list[list[float]]:
    """How long each `once` takes, measured turn about."""
    return [_seconds(s) for s in _turn_about(runs, *(_timed(o) for o in once))]


def _seconds(samples: list[Figures], index: int = 0) -> list[float]:
    return [figures[index] for figures in samples]


class _BootFailed(RuntimeError):
    """A driver that never said ready: noted, and the sample taken again once."""


def _retried(measure: Callable[[], Figures], failures: list[str]) -> Callable[[], Figures]:
    def again() -> Figures:
        try:
            return measure()
        except _BootFailed as failure:
            failures.append(str(failure))
            return measure()

    return again


def _series(runs: int, once: Callable[[], None]) -> list[float]:
    return _interleaved(runs, once)[0]


def _backend_cycle(backend: SandboxBackend) -> Callable[[], None]:
    def once() -> None:
        ref = backend.create(
            SandboxSpec(subject="session:bench", app_id="app_bench", labels=LABELS)
        )
        try:
            result = backend.exec(ref, ["true"])
            if result.exit_code != 0:
                raise RuntimeError(f"exec true failed: {result.stderr_text}")
        finally:
            backend.remove(ref)

    return once


def _line(label: str, samples: list[float]) -> str:
    return f"{label:<48} median {statistics.median(samples) * 1000:7.0f} ms   p95 {_p95(samples) * 1000:7.0f} ms"


def _ratio(label: str, numerator: list[float], denominator: list[float]) -> str:
    return f"{label:<48} {statistics.median(numerator) / statistics.median(denominator):.2f}x"


def _base_image(client: docker.DockerClient) -> tuple[str, float | None]:
    """Tag BASE_IMAGE_TAG on the sandbox image built from the same Dockerfile and the same
    driver sources without the runtimes' payload: no claude-agent-sdk (its wheel carries
    Claude Code) and no OpenCode binary (rg stays: the Dockerfile checks it). Its content
    tag, and the build's seconds (None: that content was built already)."""
    from unittest import mock

    from mosoo_core.runtime.sandbox import image as image_module

    requirements = "".join(
        line
        for line in image_module.driver_requirements().splitlines(keepends=True)
        if not line.startswith("claude-agent-sdk==")
    )
    # Both feed the image's content tag, so this build gets a tag of its own. Not
    # ensure_sandbox_image: its machine-wide lock would hold other builds while ours runs.
    with (
        mock.patch.object(image_module, "driver_requirements", lambda: requirements),
        mock.patch.object(image_module, "opencode_package", lambda: None),
    ):
        tag = image_module.sandbox_image_tag(client, image_module.ensure_base_image(client))
        built = image_module._image_id(client, tag) is not None
        started = time.perf_counter()
        image_module._ensure_sandbox_image_locked(client, "", False, print)
        seconds = None if built else time.perf_counter() - started
    if image_module._image_id(client, BASE_IMAGE_TAG) not in (
        None,
        image_module._image_id(client, tag),
    ):
        client.images.remove(BASE_IMAGE_TAG)  # one kept from older sources: it goes
    repository, name = BASE_IMAGE_TAG.split(":")
    client.images.get(tag).tag(repository, name)
    return tag, seconds


def _sizes(client: docker.DockerClient, image: str) -> list[str]:
    """The two images' sizes and what each runtime's payload takes in the full one."""
    lines = []
    for label, tag in (("full image", image), ("bench-base (no payload)", BASE_IMAGE_TAG)):
        size = client.images.get(tag).attrs["Size"]
        lines.append(f"    {label:<44} {size / 1e6:8.0f} MB  ({tag})")
    site = "/opt/mosoo/venv/lib/python3.11/site-packages"
    payload = {
        "claude: claude_agent_sdk (Claude Code binary)": f"{site}/claude_agent_sdk",
        "acp: opencode binary": "/opt/mosoo/opencode/bin/opencode",
        "acp: rg (in both images)": "/opt/mosoo/opencode/bin/rg",
    }
    output = client.containers.run(
        image,
        ["du", "-sb", *payload.values()],
        remove=True,
        labels=LABELS,
        network_mode="none",
    ).decode()
    measured = {
        path: int(size) for size, path in (line.split("\t") for line in output.splitlines())
    }
    for label, path in payload.items():
        lines.append(f"    {label:<44} {measured[path] / 1e6:8.0f} MB")
    difference = (
        client.images.get(image).attrs["Size"] - client.images.get(BASE_IMAGE_TAG).attrs["Size"]
    )
    lines.append(f"    {'difference of the two images':<44} {difference / 1e6:8.0f} MB")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--runs", type=int, default=10)
    parser.add_argument(
        "--keep-base-image", action="store_true", help=f"keep {BASE_IMAGE_TAG} for the next run"
    )
    parser.add_argument("--images-only", action="store_true", help="only (j)")
    parser.add_argument(
        "--pool", action="store_true", help="only (a) and the warm pool's (k), (l), (m)"
    )
    arguments = parser.parse_args()
    runs = arguments.runs
    if arguments.pool:
        image = DockerBackend(docker.from_env(timeout=600)).image  # built before anything is timed
        print(f"image {image}, {runs} runs per series (after one warm-up), turn about\n")
        _print_pool(_pool_series(runs))
        return

    client = docker.from_env(timeout=600)
    backend = DockerBackend(client)
    image = backend.image  # built (or found) before anything is timed
    base_content_tag, base_build_seconds = _base_image(client)
    print(f"image {image}, {runs} runs per series (after one warm-up)\n")

    def bare(on: str = image) -> None:
        client.containers.run(on, ["true"], remove=True, labels=LABELS, network_mode="none")

    bare_samples: list[float] = []
    ours: list[float] = []
    process_samples: list[float] = []
    try:
        if not arguments.images_only:
            bare_samples = _series(runs, bare)
            ours = _series(runs, _backend_cycle(backend))
            with tempfile.TemporaryDirectory(prefix="mosoo-bench-") as scratch:
                Path(scratch).chmod(0o711)
                process = ProcessBackend(
                    Path(scratch) / "sandboxes", runtime_parent=ROOT / "data" / "sandbox-runtime"
                )
                process_samples = _series(runs, _backend_cycle(process))
        bare_full, bare_base = _interleaved(runs, bare, lambda: bare(BASE_IMAGE_TAG))
        sizes = _sizes(client, image)
        control = _control_series(runs, BASE_IMAGE_TAG, arguments.images_only)
    finally:
        for container in client.containers.list(
            all=True, filters={"label": "mosoo.bench=sandbox_start"}
        ):
            container.remove(force=True)
        for ref in backend.list_by_label(LABELS):
            backend.remove(ref)
        if not arguments.keep_base_image:
            client.images.remove(BASE_IMAGE_TAG)
            client.images.remove(base_content_tag)

    if not arguments.images_only:
        _print_series(bare_samples, ours, process_samples, control)
    built = (
        f"built in {base_build_seconds:.0f} s"
        if base_build_seconds is not None
        else f"found: {base_content_tag}, kept by an earlier --keep-base-image"
    )
    print(f"(j) one image for all runtimes, or one per runtime? (bench-base {built})")
    print("\n".join(sizes))
    print(_line("    docker run --rm true: full image", bare_full))
    print(_line("    docker run --rm true: bench-base", bare_base))
    print(_ratio("    ratio full / bench-base", bare_full, bare_base))
    print(_line("    request to driver ready (openai): full image", control.full_ready))
    print(_line("    request to driver ready (openai): bench-base", control.base_ready))
    print(_ratio("    ratio full / bench-base", control.full_ready, control.base_ready))
    print(f"boots that never said ready (taken again): {len(control.failures)}")
    for failure in control.failures:
        print(f"    {failure}")


def _print_series(
    bare_samples: list[float],
    ours: list[float],
    process_samples: list[float],
    control: _ControlFigures,
) -> None:
    print(_line("(a) docker run --rm <image> true (SDK)", bare_samples))
    print(_line("(b) docker backend: create + exec true + remove", ours))
    print(_ratio("    ratio of medians (b) / (a)", ours, bare_samples))
    print(_line("(c) process backend: create + exec true + remove", process_samples))
    print(_line("(d) request to driver ready, cold Cattle", control.cattle))
    print(_ratio("    ratio to bare docker run (a)", control.cattle, bare_samples))
    print(_line("(e) request to driver ready, warm Pet", control.pet))
    print(_line("(f) (d) with an environment: setup + limited", control.with_environment))
    print(_ratio("    ratio to (d)", control.with_environment, control.cattle))
    print(_line("(g) (d) with a built environment (packages)", control.packaged))
    print(_line("    (d) again, measured turn about with (g)", control.cattle_again))
    print(
        _ratio("    ratio of (g) to (d) measured with it", control.packaged, control.cattle_again)
    )
    print(
        f"{'(h) build: 1 pip + 1 npm package (loopback index)':<48} {control.build_seconds:8.2f} s"
    )
    print("(i) per runtime, cold Cattle, turn about (dispatch_run; scripted text answer)")
    openai_ready = _seconds(control.runtimes["openai"])
    for runtime, figures in control.runtimes.items():
        ready, first_token = _seconds(figures), _seconds(figures, 1)
        print(_line(f"    {runtime}: request to driver ready", ready))
        print(_line(f"    {runtime}: request to first agent.message.delta", first_token))
        print(_ratio(f"    {runtime}: ready, ratio to openai's", ready, openai_ready))


@dataclass
class _ControlFigures:
    cattle: list[float]
    pet: list[float]
    with_environment: list[float]
    cattle_again: list[float]
    packaged: list[float]
    build_seconds: float
    runtimes: dict[str, list[Figures]]  # (request to ready, request to first token)
    full_ready: list[float]
    base_ready: list[float]
    failures: list[str]  # boots that never said ready (each sample taken again)


@dataclass
class _World:
    """A real `mosoo control` and an App to run Agents in (SQLite, Redis db_number(7), a temp
    data dir), with the scripted model servers and package indexes on loopback."""

    account_id: str
    app_id: str
    credentials: dict[str, str]  # "unserved", "openai", "claude"
    openai_model: Any
    anthropic_model: Any
    bindings: dict[str, str]  # environment ids: "env" (setup, secret, limited), "packages"
    packages_hash: str
    scratch: Path

    def agent(self, name: str, kind: str, runtime: str, credential: str, model: str) -> str:
        from mosoo_core import agents
        from mosoo_core.db import session_scope

        with session_scope() as db:
            agent = agents.create_agent(
                db, self.account_id, self.app_id, name=f"bench {name}", kind=kind, runtime=runtime
            )
            agents.update_agent(
                db,
                self.account_id,
                self.app_id,
                agent.id,
                agents.AgentChanges(
                    provider_credential_id=self.credentials[credential],
                    model=model,
                    environment_id=self.bindings.get(name),
                ),
            )
            return agent.id

    def message(self, agent_id: str, publish: bool = False) -> tuple[str, str]:
        """A new thread of the Agent with one message: (thread, run). `publish`: its events
        go to the thread's stream too, as a front door sends them."""
        from mosoo_core import sessions, streams
        from mosoo_core.db import session_scope

        with session_scope() as db:
            thread = sessions.create_session(db, self.account_id, self.app_id, agent_id)
            sent = sessions.send_message(db, self.account_id, thread.id, "hi")
            thread_id, run_id = thread.id, sent.run.id
        if publish:
            streams.publish_events(sent.events)
        return thread_id, run_id

    def ready(self, agent_id: str, backend: SandboxBackend) -> tuple[str, float]:
        """Request to driver ready, as the worker dispatches it (`dispatch_run`, which returns
        once the driver said ready and its input is queued): (run, seconds)."""
        from mosoo_core.runtime import runs as run_module

        started = time.perf_counter()
        _, run_id = self.message(agent_id)
        status = run_module.dispatch_run(run_id, backend)
        seconds = time.perf_counter() - started
        if status != "booting":
            raise _BootFailed(f"the run did not boot ({status}): {_run_error(run_id)}")
        return run_id, seconds


def _remove_run_sandbox(run_id: str, backend: SandboxBackend) -> None:
    """What the run's teardown removes (the bench runs no worker to do it)."""
    from mosoo_core.db import session_scope
    from mosoo_core.runtime.sandbox import LABEL_DRIVER_INSTANCE
    from mosoo_core.tables.sessions import SessionRun

    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        instance_id = run.driver_instance_id if run else None
    for ref in backend.list_by_label({LABEL_DRIVER_INSTANCE: instance_id or "-"}):
        backend.remove(ref)


def _backend_on(image: str) -> SandboxBackend:
    """A Docker backend as `get_backend` makes it (host folders for attachments and standby
    payloads), on another image."""
    from mosoo_core.settings import get_settings

    return DockerBackend(
        docker.from_env(timeout=600),
        image=image,
        attachments_root=get_settings().data_dir.resolve() / "sandbox-attachments",
    )


def _run_error(run_id: str) -> str:
    from mosoo_core.db import session_scope
    from mosoo_core.tables.sessions import SessionRun

    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        return f"{run.error_code}: {run.error_message}" if run else "gone"


@contextlib.contextmanager
def _world(env_extra: dict[str, str] | None = None) -> Iterator[_World]:
    import base64
    import os
    import subprocess

    import redis

    from tests.support.anthropic_server import ScriptedAnthropicServer
    from tests.support.openai_server import ScriptedOpenAIServer
    from tests.support.package_index import NpmRegistry, PyPIIndex
    from tests.support.redis_db import db_number

    redis_db = db_number(7)
    servers = contextlib.ExitStack()
    pypi = servers.enter_context(PyPIIndex())
    npm = servers.enter_context(NpmRegistry())
    pypi.add_package("bench-tool", "1.0.0", {"bench_tool.py": "NAME = 'bench'\n"})
    npm.add_package("bench-pad", "1.0.0", {"index.js": "module.exports = (s) => s;\n"})
    model_key = "sk-bench-scripted"
    openai_model = servers.enter_context(ScriptedOpenAIServer(models=["m"], api_key=model_key))
    anthropic_model = servers.enter_context(
        ScriptedAnthropicServer(models=["claude-test"], api_key=model_key)
    )
    scratch = Path(tempfile.mkdtemp(prefix="mosoo-bench-ready-"))
    scratch.chmod(0o755)
    env = {
        "MOSOO_DATA_DIR": str(scratch / "data"),
        "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MOSOO_CONTROL_PORT": "0",
        "MOSOO_LOG_LEVEL": "WARNING",
        "MOSOO_PIP_INDEX_URL": pypi.simple_url,
        "MOSOO_NPM_REGISTRY": npm.base_url,
        "MOSOO_EGRESS_ALLOW_LOOPBACK": "1",  # the indexes are on loopback
        "MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS": "true",  # so are the scripted model servers
        "MOSOO_POOL_SIZE": "0",  # a series that wants the warm pool turns it on
        **(env_extra or {}),
    }
    os.environ.update(env)
    from mosoo_core import environments, identity, vault
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade
    from mosoo_core.runtime.sandbox import get_backend
    from mosoo_core.settings import get_settings, reset_settings_cache

    reset_settings_cache()
    redis.Redis(db=redis_db).flushdb()
    upgrade()
    control = subprocess.Popen(
        [sys.executable, "-m", "mosoo_core.cli", "control"],
        cwd=ROOT,
        env={**os.environ},
        start_new_session=True,
    )
    socket_path = get_settings().resolved_control_socket
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with session_scope() as db:
            account = identity.sign_in_identity(
                db, provider="email", subject="b@example.com", email="b@example.com"
            )
            app_id = identity.list_apps(db, account.id)[0].id

            def credential(provider: str, base_url: str, model: str, key: str = "") -> str:
                return vault.create_provider_credential(
                    db,
                    account.id,
                    app_id,
                    vault.ProviderCredentialInput(
                        name=f"Bench {provider}",
                        provider=provider,
                        base_url=base_url,
                        api_key=key,
                        models=[model],
                    ),
                ).id

            credentials = {
                "unserved": credential("ollama", "http://127.0.0.1:11434/v1", "m"),
                "openai": credential("openai_compatible", openai_model.base_url, "m", model_key),
                "claude": credential(
                    "anthropic", anthropic_model.base_url, "claude-test", model_key
                ),
            }
            bound = environments.create_environment(
                db,
                account.id,
                app_id,
                "Bench",
                environments.EnvironmentChanges(
                    setup_script="mkdir -p /workspace/tools",
                    variables=[environments.VariableInput("TOKEN", "bench-secret", secret=True)],
                    network_policy="limited",
                    allowed_hosts=["example.com"],
                ),
            )
            packaged = environments.create_environment(
                db,
                account.id,
                app_id,
                "Packages",
                environments.EnvironmentChanges(pip=["bench-tool==1.0.0"], npm=["bench-pad@1.0.0"]),
            )
            assert packaged.build is not None
            world = _World(
                account_id=account.id,
                app_id=app_id,
                credentials=credentials,
                openai_model=openai_model,
                anthropic_model=anthropic_model,
                bindings={"env": bound.id, "packages": packaged.id},
                packages_hash=packaged.build.packages_hash,
                scratch=scratch,
            )
        yield world
    finally:
        backend = get_backend()
        from mosoo_core.runtime.labels import installation_label

        for ref in backend.list_by_label(installation_label()):
            backend.remove(ref)
        control.terminate()
        control.wait(20)
        redis.Redis(db=redis_db).flushdb()
        servers.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _control_series(runs: int, base_image: str, images_only: bool = False) -> _ControlFigures:
    """Boot real drivers against a real control process, with the scripted model servers
    on loopback standing in for the providers."""
    from mosoo_core import streams
    from mosoo_core.runtime import builds as build_module
    from mosoo_core.runtime import runs as run_module
    from mosoo_core.runtime.sandbox import get_backend
    from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES
    from tests.support.anthropic_server import MessageTurn, TextBlock
    from tests.support.openai_server import TextTurn

    answer = "Hello from the bench."
    failures: list[str] = []
    with _world() as world:
        backend = get_backend()
        base_backend = _backend_on(base_image)
        # name: (kind, runtime, credential, model)
        plans = {
            "cattle": ("cattle", "openai", "unserved", "m"),
            "pet": ("pet", "openai", "unserved", "m"),
            "env": ("cattle", "openai", "unserved", "m"),
            "packages": ("cattle", "openai", "unserved", "m"),
            "openai": ("cattle", "openai", "openai", "m"),
            "claude": ("cattle", "claude", "claude", "claude-test"),
            "acp": ("cattle", "acp", "openai", "m"),
        }
        agent_ids = {name: world.agent(name, *plan) for name, plan in plans.items()}

        def ready_once(kind: str, on: SandboxBackend = backend) -> Figures:
            run_id, seconds = world.ready(agent_ids[kind], on)
            if kind != "pet":
                _remove_run_sandbox(run_id, on)
            return (seconds,)

        def first_token_once(runtime: str) -> Figures:
            """One cold Cattle run as the worker dispatches it, answered with scripted text:
            (request to driver ready, request to the first agent.message.delta)."""
            if runtime == "claude":
                world.anthropic_model.add(MessageTurn([TextBlock(answer)]))
            else:
                world.openai_model.add(TextTurn(answer))
            started = time.perf_counter()
            thread_id, run_id = world.message(agent_ids[runtime], publish=True)
            if (status := run_module.dispatch_run(run_id, backend)) != "booting":
                raise _BootFailed(
                    f"{runtime}: the run did not boot ({status}, {_run_error(run_id)})"
                )
            ready = time.perf_counter() - started
            client = streams.sync_client()
            last, first_token = "0-0", None
            deadline = time.monotonic() + 120
            while first_token is None and time.monotonic() < deadline:
                read: Any = client.xread({streams.events_stream(thread_id): last}, block=1000)
                for _stream, entries in read or []:
                    for entry_id, fields in entries:
                        last = entry_id
                        for event in streams.decode_events(fields):
                            if event["type"] == "agent.message.delta" and first_token is None:
                                first_token = time.perf_counter() - started
            while (status := run_module._status(run_id)) in ACTIVE_RUN_STATUSES:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {runtime} run did not end")
                time.sleep(0.05)
            if first_token is None or status != "completed":
                raise RuntimeError(f"the {runtime} run ended {status} without a streamed answer")
            run_module.finish_run_sandbox(run_id, backend)
            return ready, first_token

        def ready(*boots: tuple[str, SandboxBackend]) -> list[list[float]]:
            """Request to driver ready for each (Agent, backend), measured turn about."""
            measures = (_retried(partial(ready_once, *boot), failures) for boot in boots)
            return [_seconds(samples) for samples in _turn_about(runs, *measures)]

        cattle: list[float] = []
        pet: list[float] = []
        with_environment: list[float] = []
        cattle_again: list[float] = []
        with_packages: list[float] = []
        build_seconds = 0.0
        per_runtime: list[list[Figures]] = [[] for _ in RUNTIMES]
        if not images_only:
            [cattle] = ready(("cattle", backend))
            [pet] = ready(("pet", backend))
            [with_environment] = ready(("env", backend))
            started = time.perf_counter()
            if build_module.build_packages(world.packages_hash, backend) != "ready":
                raise RuntimeError("the build of the bench packages failed")
            build_seconds = time.perf_counter() - started
            # Turn about with plain cold Cattle runs: the goal is a ratio between the two.
            cattle_again, with_packages = ready(("cattle", backend), ("packages", backend))
            per_runtime = _turn_about(
                runs, *(_retried(partial(first_token_once, r), failures) for r in RUNTIMES)
            )
        full_ready, base_ready = ready(("cattle", backend), ("cattle", base_backend))
    return _ControlFigures(
        cattle,
        pet,
        with_environment,
        cattle_again,
        with_packages,
        build_seconds,
        dict(zip(RUNTIMES, per_runtime, strict=True)),
        full_ready,
        base_ready,
        failures,
    )


@dataclass
class _PoolFigures:
    bare: list[float]
    hit: list[float]
    miss: list[float]
    wake: list[float]
    miss_phases: dict[str, list[float]]  # phase label -> seconds, per miss
    failures: list[str]


def _pool_series(runs: int) -> _PoolFigures:
    """Issue 15's start figures, turn about in one run: (a) bare `docker run --rm <image>
    true`; (k) a Task run's request to driver ready when the warm pool has a member standing
    by; (l) the same on a pool miss (a cold start); (m) an Assistant's request to ready when
    its sandbox is hibernated (woken with its workspace restored)."""
    from sqlmodel import select

    from mosoo_core.db import session_scope
    from mosoo_core.runtime import pet_operations, pool
    from mosoo_core.runtime import runs as run_module
    from mosoo_core.runtime.sandbox import get_backend
    from mosoo_core.sessions import diagnostics
    from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, RunMark, SessionRun

    failures: list[str] = []
    miss_phases: dict[str, list[float]] = {}
    with _world({"MOSOO_POOL_SIZE": "1", "MOSOO_POOL_MAX_MEMORY_MB": "65536"}) as world:
        backend = get_backend()
        client = docker.from_env()
        image = backend.image_name()
        task = world.agent("pool", "cattle", "openai", "unserved", "m")
        pet = world.agent("pet", "pet", "openai", "unserved", "m")

        def sandbox_detail(run_id: str) -> dict[str, Any]:
            with session_scope() as db:
                mark = db.exec(
                    select(RunMark).where(RunMark.run_id == run_id, RunMark.name == "sandbox")
                ).one()
                return dict(mark.detail)

        def ended(run_id: str) -> None:
            deadline = time.monotonic() + 60
            while run_module._status(run_id) in ACTIVE_RUN_STATUSES:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run_id} did not end")
                time.sleep(0.05)

        def bare() -> Figures:
            started = time.perf_counter()
            client.containers.run(image, ["true"], remove=True, labels=LABELS, network_mode="none")
            return (time.perf_counter() - started,)

        def task_ready(expect: str) -> Figures:
            run_id, seconds = world.ready(task, backend)
            got = sandbox_detail(run_id).get("pool")
            ended(run_id)  # quickly: the model is unserved
            _remove_run_sandbox(run_id, backend)
            if got != expect:
                raise _BootFailed(f"expected a pool {expect}, got {got}")
            if expect == "miss":
                with session_scope() as db:
                    run = db.get(SessionRun, run_id)
                    assert run is not None
                    for phase in diagnostics.run_phases(db, run):
                        miss_phases.setdefault(phase.label, []).append(phase.seconds)
            return (seconds,)

        def hit() -> Figures:
            # Untimed: a member made and standing by, as the pool keeps them between runs.
            deadline = time.monotonic() + 60
            while not _standing_by(task, world):
                pool.refill_pool(backend)
                if time.monotonic() > deadline:
                    raise RuntimeError("no pool member stood by within 60 s")
                time.sleep(0.05)
            return task_ready("hit")

        def wake() -> Figures:
            run_id, _ = world.ready(pet, backend)  # untimed: the Agent's sandbox, then asleep
            ended(run_id)
            pet_operations.hibernate_idle(world.app_id, pet, backend)
            run_id, seconds = world.ready(pet, backend)
            ended(run_id)
            return (seconds,)

        task_ready("miss")  # the key's first run: its pool starts after it
        samples = _turn_about(
            runs,
            bare,
            _retried(hit, failures),
            _retried(partial(task_ready, "miss"), failures),
            _retried(wake, failures),
        )
    bare_s, hit_s, miss_s, wake_s = (_seconds(series) for series in samples)
    return _PoolFigures(bare_s, hit_s, miss_s, wake_s, miss_phases, failures)


def _standing_by(agent_id: str, world: _World) -> bool:
    from mosoo_core.db import session_scope
    from mosoo_core.runtime import pool

    with session_scope() as db:
        return any(f.standing_by for f in pool.figures(db, app_id=world.app_id))


def _print_pool(figures: _PoolFigures) -> None:
    print(_line("(a) docker run --rm <image> true (SDK)", figures.bare))
    print(_line("(k) request to driver ready, warm pool hit", figures.hit))
    print(_line("(l) request to driver ready, pool miss (cold)", figures.miss))
    print(_line("(m) request to driver ready, Pet wake", figures.wake))
    print(_ratio("    (k) / (a)", figures.hit, figures.bare))
    print(_ratio("    (l) / (a)   (goal: at most 1.30x)", figures.miss, figures.bare))
    print(_ratio("    (m) / (a)", figures.wake, figures.bare))
    print("    (l) phase by phase (medians; from the runs' own marks):")
    for label, seconds in figures.miss_phases.items():
        print(f"        {label:<36} {statistics.median(seconds) * 1000:7.1f} ms")
    print(f"boots that did not go as expected (taken again): {len(figures.failures)}")
    for failure in figures.failures:
        print(f"    {failure}")


if __name__ == "__main__":
    main()
