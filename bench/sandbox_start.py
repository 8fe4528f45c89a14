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
of those packages takes, from the test package indexes on loopback through the egress proxy.
Each series gets one unmeasured warm-up run. Everything created is removed.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from mosoo_core.runtime.labels import installation_label  # noqa: E402
from mosoo_core.runtime.sandbox import BOOT_PAYLOAD, SandboxBackend, SandboxSpec  # noqa: E402
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend  # noqa: E402
from mosoo_core.runtime.sandbox.process_backend import ProcessBackend  # noqa: E402

LABELS = {"mosoo.test": "1", "mosoo.bench": "sandbox_start"}


def _p95(samples: list[float]) -> float:
    """Nearest-rank 95th percentile (with 10 samples: the slowest)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _series(runs: int, once: Callable[[], None]) -> list[float]:
    once()  # warm-up: caches, first-use costs
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        once()
        samples.append(time.perf_counter() - started)
    return samples


def _interleaved(
    runs: int, first: Callable[[], None], second: Callable[[], None]
) -> tuple[list[float], list[float]]:
    """Two series measured turn about, so drift on a noisy machine touches both alike."""
    a: list[float] = []
    b: list[float] = []
    first()
    second()
    for _ in range(runs):
        for once, samples in ((first, a), (second, b)):
            started = time.perf_counter()
            once()
            samples.append(time.perf_counter() - started)
    return a, b


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--runs", type=int, default=10)
    runs = parser.parse_args().runs

    client = docker.from_env(timeout=600)
    backend = DockerBackend(client)
    image = backend.image  # built (or found) before anything is timed
    print(f"image {image}, {runs} runs per series (after one warm-up)\n")

    def bare() -> None:
        client.containers.run(image, ["true"], remove=True, labels=LABELS, network_mode="none")

    try:
        bare_samples = _series(runs, bare)
        ours = _series(runs, _backend_cycle(backend))
        with tempfile.TemporaryDirectory(prefix="mosoo-bench-") as scratch:
            Path(scratch).chmod(0o711)
            process = ProcessBackend(
                Path(scratch) / "sandboxes", runtime_parent=ROOT / "data" / "sandbox-runtime"
            )
            process_samples = _series(runs, _backend_cycle(process))
    finally:
        for container in client.containers.list(
            all=True, filters={"label": "mosoo.bench=sandbox_start"}
        ):
            container.remove(force=True)
        for ref in backend.list_by_label(LABELS):
            backend.remove(ref)

    print(_line("(a) docker run --rm <image> true (SDK)", bare_samples))
    print(_line("(b) docker backend: create + exec true + remove", ours))
    ratio = statistics.median(ours) / statistics.median(bare_samples)
    print(f"{'    ratio of medians (b) / (a)':<48} {ratio:.2f}x")
    print(_line("(c) process backend: create + exec true + remove", process_samples))
    cattle, pet, with_environment, with_packages, build_seconds = _driver_ready_series(
        runs, backend
    )
    print(_line("(d) request to driver ready, cold Cattle", cattle))
    print(
        f"{'    ratio to bare docker run (a)':<48} {statistics.median(cattle) / statistics.median(bare_samples):.2f}x"
    )
    print(_line("(e) request to driver ready, warm Pet", pet))
    print(_line("(f) (d) with an environment: setup + limited", with_environment))
    print(
        f"{'    ratio to (d)':<48} {statistics.median(with_environment) / statistics.median(cattle):.2f}x"
    )
    cattle_again, packaged = with_packages
    print(_line("(g) (d) with a built environment (packages)", packaged))
    print(_line("    (d) again, measured turn about with (g)", cattle_again))
    print(
        f"{'    ratio of (g) to (d) measured with it':<48} "
        f"{statistics.median(packaged) / statistics.median(cattle_again):.2f}x"
    )
    print(f"{'(h) build: 1 pip + 1 npm package (loopback index)':<48} {build_seconds:8.2f} s")


def _driver_ready_series(
    runs: int, backend: DockerBackend
) -> tuple[list[float], list[float], list[float], tuple[list[float], list[float]], float]:
    """Boot real drivers against a real control process (SQLite, Redis db 7, temp data dir)."""
    import base64
    import contextlib
    import os
    import subprocess

    import redis

    from tests.support.package_index import NpmRegistry, PyPIIndex

    indexes = contextlib.ExitStack()
    pypi = indexes.enter_context(PyPIIndex())
    npm = indexes.enter_context(NpmRegistry())
    pypi.add_package("bench-tool", "1.0.0", {"bench_tool.py": "NAME = 'bench'\n"})
    npm.add_package("bench-pad", "1.0.0", {"index.js": "module.exports = (s) => s;\n"})

    scratch = Path(tempfile.mkdtemp(prefix="mosoo-bench-ready-"))
    scratch.chmod(0o755)
    env = {
        "MOSOO_DATA_DIR": str(scratch / "data"),
        "MOSOO_REDIS_URL": "redis://127.0.0.1:6379/7",
        "MOSOO_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MOSOO_CONTROL_PORT": "0",
        "MOSOO_LOG_LEVEL": "WARNING",
        "MOSOO_SANDBOX_IMAGE": backend.image,
        "MOSOO_PIP_INDEX_URL": pypi.simple_url,
        "MOSOO_NPM_REGISTRY": npm.base_url,
        "MOSOO_EGRESS_ALLOW_LOOPBACK": "1",  # the indexes are on loopback
    }
    os.environ.update(env)
    from mosoo_core import agents, environments, identity, sessions, vault
    from mosoo_core.db import session_scope
    from mosoo_core.migrations import upgrade
    from mosoo_core.runtime import builds as build_module
    from mosoo_core.runtime import runs as run_module
    from mosoo_core.settings import get_settings, reset_settings_cache

    reset_settings_cache()
    redis.Redis(db=7).flushdb()
    upgrade()
    control = subprocess.Popen(
        [sys.executable, "-m", "mosoo_core.cli", "control"],
        cwd=ROOT,
        env={**os.environ},
        start_new_session=True,
    )
    socket_path = get_settings().resolved_control_socket
    made: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with session_scope() as db:
            account = identity.sign_in_identity(
                db, provider="email", subject="b@example.com", email="b@example.com"
            )
            app_id = identity.list_apps(db, account.id)[0].id
            credential = vault.create_provider_credential(
                db,
                account.id,
                app_id,
                vault.ProviderCredentialInput(
                    name="Bench",
                    provider="ollama",
                    base_url="http://127.0.0.1:11434/v1",
                    models=["m"],
                ),
            )
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
            agent_ids = {}
            for name, kind in (
                ("cattle", "cattle"),
                ("pet", "pet"),
                ("env", "cattle"),
                ("packages", "cattle"),
            ):
                agent = agents.create_agent(db, account.id, app_id, name=f"bench {name}", kind=kind)
                agents.update_agent(
                    db,
                    account.id,
                    app_id,
                    agent.id,
                    agents.AgentChanges(
                        provider_credential_id=credential.id,
                        model="m",
                        environment_id=bindings.get(name),
                    ),
                )
                agent_ids[name] = agent.id

        def ready_once(kind: str) -> None:
            with session_scope() as db:
                thread = sessions.create_session(db, account.id, app_id, agent_ids[kind])
                run_id = sessions.send_message(db, account.id, thread.id, "hi").run.id
            with session_scope() as db:
                plan, _ = run_module.plan_boot(db, run_id)
            assert plan is not None
            layer = run_module._await_layer(backend, plan) if plan.packages_hash else None
            if layer is not None and layer.path is None:
                raise RuntimeError(f"the environment's build failed: {layer.failure}")
            ref, created = run_module._sandbox_for(backend, plan, layer)
            made.append(ref.id)
            if created and plan.setup_script and run_module._set_up(backend, ref, plan):
                raise RuntimeError("the setup script failed")
            backend.put_file(ref, BOOT_PAYLOAD, plan.payload_json.encode(), mode=0o600)
            backend.start_driver(ref)
            if run_module._wait_ready(run_id, plan.instance_id, 60) != "ready":
                raise RuntimeError("the driver did not become ready")
            if kind != "pet":
                backend.remove(ref)

        cattle = _series(runs, lambda: ready_once("cattle"))
        pet = _series(runs, lambda: ready_once("pet"))
        with_environment = _series(runs, lambda: ready_once("env"))
        started = time.perf_counter()
        if build_module.build_packages(packages_hash, backend) != "ready":
            raise RuntimeError("the build of the bench packages failed")
        build_seconds = time.perf_counter() - started
        # Turn about with plain cold Cattle runs: the goal is a ratio between the two.
        cattle_again, with_packages = _interleaved(
            runs, lambda: ready_once("cattle"), lambda: ready_once("packages")
        )
    finally:
        for ref in backend.list_by_label(installation_label()):
            backend.remove(ref)
        control.terminate()
        control.wait(20)
        redis.Redis(db=7).flushdb()
        indexes.close()
    return cattle, pet, with_environment, (cattle_again, with_packages), build_seconds


if __name__ == "__main__":
    main()
