"""How long a sandbox takes to start, against the floor Docker itself sets.

    .venv/bin/python bench/sandbox_start.py [-n 10]

(a) bare `docker run --rm <image> true` through the SDK; (b) our docker backend: create,
exec `true`, remove; (c) for comparison, the process backend doing the same. Each series
gets one unmeasured warm-up run. Everything created carries `mosoo.test=1` and is removed.
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

from mosoo_core.runtime.sandbox import SandboxBackend, SandboxSpec  # noqa: E402
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


def _backend_cycle(backend: SandboxBackend) -> Callable[[], None]:
    def once() -> None:
        ref = backend.create(SandboxSpec(subject="session:bench", app_id="app_bench", labels=LABELS))
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
            process = ProcessBackend(Path(scratch) / "sandboxes", runtime_parent=ROOT / "data" / "sandbox-runtime")
            process_samples = _series(runs, _backend_cycle(process))
    finally:
        for container in client.containers.list(all=True, filters={"label": "mosoo.bench=sandbox_start"}):
            container.remove(force=True)
        for ref in backend.list_by_label(LABELS):
            backend.remove(ref)

    print(_line("(a) docker run --rm <image> true (SDK)", bare_samples))
    print(_line("(b) docker backend: create + exec true + remove", ours))
    ratio = statistics.median(ours) / statistics.median(bare_samples)
    print(f"{'    ratio of medians (b) / (a)':<48} {ratio:.2f}x")
    print(_line("(c) process backend: create + exec true + remove", process_samples))
    print("(d) request to driver ready: not measured yet (needs runs and the driver)")


if __name__ == "__main__":
    main()
