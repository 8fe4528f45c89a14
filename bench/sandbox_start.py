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
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from mosoo_core.runtime.labels import installation_label  # noqa: E402
from mosoo_core.runtime.sandbox import BOOT_PAYLOAD, SandboxBackend, SandboxSpec  # noqa: E402
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
    arguments = parser.parse_args()
    runs = arguments.runs

    client = docker.from_env(timeout=600)
    backend = DockerBackend(client)
    image = backend.image  # built (or found) before anything is timed
    base_content_tag, base_build_seconds = _base_image(client)
    base_backend = DockerBackend(client, image=BASE_IMAGE_TAG)
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
        control = _control_series(runs, backend, base_backend, arguments.images_only)
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


def _control_series(
    runs: int, backend: DockerBackend, base_backend: DockerBackend, images_only: bool = False
) -> _ControlFigures:
    """Boot real drivers against a real control process (SQLite, Redis db_number(7), temp
    data dir), with the scripted model servers on loopback standing in for the providers."""
    import base64
    import os
    import subprocess

    import redis

    from tests.support.anthropic_server import MessageTurn, ScriptedAnthropicServer, TextBlock
    from tests.support.openai_server import ScriptedOpenAIServer, TextTurn
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
    answer = "Hello from the bench."

    scratch = Path(tempfile.mkdtemp(prefix="mosoo-bench-ready-"))
    scratch.chmod(0o755)
    env = {
        "MOSOO_DATA_DIR": str(scratch / "data"),
        "MOSOO_REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MOSOO_CONTROL_PORT": "0",
        "MOSOO_LOG_LEVEL": "WARNING",
        "MOSOO_SANDBOX_IMAGE": backend.image,
        "MOSOO_PIP_INDEX_URL": pypi.simple_url,
        "MOSOO_NPM_REGISTRY": npm.base_url,
        "MOSOO_EGRESS_ALLOW_LOOPBACK": "1",  # the indexes are on loopback
        "MOSOO_PROVIDER_ALLOW_PRIVATE_NETWORKS": "true",  # so are the scripted model servers
    }
    os.environ.update(env)
    from mosoo_core import agents, environments, identity, sessions, streams, vault
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade
    from mosoo_core.runtime import builds as build_module
    from mosoo_core.runtime import runs as run_module
    from mosoo_core.settings import get_settings, reset_settings_cache
    from mosoo_core.tables.sessions import ACTIVE_RUN_STATUSES, SessionRun

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
    failures: list[str] = []
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

            unserved = credential("ollama", "http://127.0.0.1:11434/v1", "m")
            scripted = {
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
            packages_hash = packaged.build.packages_hash
            bindings = {"env": bound.id, "packages": packaged.id}
            # name: (kind, runtime, credential, model)
            plans = {
                "cattle": ("cattle", "openai", unserved, "m"),
                "pet": ("pet", "openai", unserved, "m"),
                "env": ("cattle", "openai", unserved, "m"),
                "packages": ("cattle", "openai", unserved, "m"),
                "openai": ("cattle", "openai", scripted["openai"], "m"),
                "claude": ("cattle", "claude", scripted["claude"], "claude-test"),
                "acp": ("cattle", "acp", scripted["openai"], "m"),
            }
            agent_ids = {}
            for name, (kind, runtime, credential_id, model) in plans.items():
                agent = agents.create_agent(
                    db, account.id, app_id, name=f"bench {name}", kind=kind, runtime=runtime
                )
                agents.update_agent(
                    db,
                    account.id,
                    app_id,
                    agent.id,
                    agents.AgentChanges(
                        provider_credential_id=credential_id,
                        model=model,
                        environment_id=bindings.get(name),
                    ),
                )
                agent_ids[name] = agent.id

        def message(name: str, publish: bool = False) -> tuple[str, str]:
            """A new thread of the Agent `name` with one message: (thread, run). `publish`:
            its events go to the thread's stream too, as a front door sends them."""
            with session_scope() as db:
                thread = sessions.create_session(db, account.id, app_id, agent_ids[name])
                sent = sessions.send_message(db, account.id, thread.id, "hi")
                thread_id, run_id = thread.id, sent.run.id
            if publish:
                streams.publish_events(sent.events)
            return thread_id, run_id

        def ready_once(kind: str, on: DockerBackend = backend) -> Figures:
            started = time.perf_counter()
            _, run_id = message(kind)
            with session_scope() as db:
                plan, _ = run_module.plan_boot(db, run_id)
            assert plan is not None
            layer = run_module._await_layer(on, plan) if plan.packages_hash else None
            if layer is not None and layer.path is None:
                raise RuntimeError(f"the environment's build failed: {layer.failure}")
            ref, created = run_module._sandbox_for(on, plan, layer)
            if created and plan.setup_script and run_module._set_up(on, ref, plan):
                raise RuntimeError("the setup script failed")
            on.put_file(ref, BOOT_PAYLOAD, plan.payload_json.encode(), mode=0o600)
            on.start_driver(ref)
            if run_module._wait_ready(run_id, plan.instance_id, 60) != "ready":
                # No ps in the image: the processes' command lines, one a line.
                processes = on.exec(ref, ["sh", "-c", _PROCESSES]).stdout_text
                on.remove(ref)
                raise _BootFailed(f"{kind} on {on.image}: not ready in 60 s; ps:\n{processes}")
            seconds = time.perf_counter() - started
            if kind != "pet":
                on.remove(ref)
            return (seconds,)

        def first_token_once(runtime: str) -> Figures:
            """One cold Cattle run as the worker dispatches it, answered with scripted text:
            (request to driver ready, request to the first agent.message.delta)."""
            if runtime == "claude":
                anthropic_model.add(MessageTurn([TextBlock(answer)]))
            else:
                openai_model.add(TextTurn(answer))
            started = time.perf_counter()
            thread_id, run_id = message(runtime, publish=True)
            if (status := run_module.dispatch_run(run_id, backend)) != "booting":
                with session_scope() as db:
                    run = db.get(SessionRun, run_id)
                    why = f"{run.error_code}: {run.error_message}" if run else "gone"
                raise _BootFailed(f"{runtime}: the run did not boot ({status}, {why})")
            ready = time.perf_counter() - started
            client = streams.sync_client()
            last, first_token = "0-0", None
            deadline = time.monotonic() + 120
            while first_token is None and time.monotonic() < deadline:
                read: Any = client.xread({streams.events_stream(thread_id): last}, block=1000)
                for _stream, entries in read or []:
                    for entry_id, fields in entries:
                        last = entry_id
                        event = streams.decode_event(fields)
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

        def ready(*boots: tuple[str, DockerBackend]) -> list[list[float]]:
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
            if build_module.build_packages(packages_hash, backend) != "ready":
                raise RuntimeError("the build of the bench packages failed")
            build_seconds = time.perf_counter() - started
            # Turn about with plain cold Cattle runs: the goal is a ratio between the two.
            cattle_again, with_packages = ready(("cattle", backend), ("packages", backend))
            per_runtime = _turn_about(
                runs, *(_retried(partial(first_token_once, r), failures) for r in RUNTIMES)
            )
        full_ready, base_ready = ready(("cattle", backend), ("cattle", base_backend))
    finally:
        for ref in backend.list_by_label(installation_label()):
            backend.remove(ref)
        control.terminate()
        control.wait(20)
        redis.Redis(db=redis_db).flushdb()
        servers.close()
        shutil.rmtree(scratch, ignore_errors=True)
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


if __name__ == "__main__":
    main()
