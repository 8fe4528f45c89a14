"""A sandbox cannot take the host down: fork bombs and memory hogs stop at its limits.
The process backend is tested twice: with cgroups (root) and with rlimits only."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mosoo_core.runtime.sandbox import SandboxBackend
from tests.integration.sandbox.conftest import MakeSandbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FORK_BOMB = ":(){ :|:& };:"


@pytest.fixture(params=["docker", "process", "process_rlimit"])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    return request.getfixturevalue(f"{request.param}_backend")  # type: ignore[no-any-return]


def _oom_kills(backend: SandboxBackend) -> bool:
    """Docker and cgroups kill the hog; rlimits make its allocation fail instead."""
    return backend.name == "docker" or backend.limits_mechanism == "cgroup"  # type: ignore[attr-defined]


def _isolated_limits(backend: SandboxBackend) -> bool:
    """Per-sandbox pids limits (docker, cgroups). Under rlimits alone RLIMIT_NPROC counts
    every process of the sandbox uid, so a neighbour shares the bomb's budget (documented)."""
    return _oom_kills(backend)


def _bomb_processes() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if FORK_BOMB.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def test_a_fork_bomb_hits_the_pids_limit_and_leaves_nothing_after_remove(
    backend: SandboxBackend, make_sandbox: MakeSandbox
) -> None:
    ref = make_sandbox(pids_limit=64)
    neighbour = make_sandbox()
    with ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(
            backend.exec, ref, ["bash", "-c", f"{FORK_BOMB}; exec sleep 60"], timeout=5
        )
        if _isolated_limits(backend):
            # While the bomb runs, another sandbox still starts processes and answers.
            time.sleep(1)
            assert not bomb.done()
            busy = backend.exec(neighbour, ["python3", "-c", "print(sum(range(10)))"], timeout=30)
            assert busy.stdout_text == "45\n", busy.stderr_text[-300:]
        result = bomb.result()

    assert result.timed_out
    assert "Resource temporarily unavailable" in result.stderr_text, result.stderr_text[-500:]
    # The sandbox is still usable, and the host can still start processes.
    assert backend.exec(ref, ["true"], timeout=30).exit_code == 0
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert backend.exec(neighbour, ["true"], timeout=30).exit_code == 0
    backend.remove(ref)
    assert _bomb_processes() == []


def test_a_memory_hog_is_stopped_at_the_memory_limit_and_the_sandbox_survives(
    backend: SandboxBackend, make_sandbox: MakeSandbox
) -> None:
    ref = make_sandbox(memory_mb=128)
    hog = "data = b'x' * (256 << 20); print('allocated', len(data))"  # twice the limit, touched
    result = backend.exec(ref, ["python3", "-c", hog], timeout=120)

    assert "allocated" not in result.stdout_text
    if _oom_kills(backend):
        assert result.exit_code == 137, (result.exit_code, result.stderr_text[-500:])  # SIGKILL
    else:
        assert "MemoryError" in result.stderr_text
    assert (
        backend.exec(ref, ["python3", "-c", "print('still here')"], timeout=30).stdout_text
        == "still here\n"
    )
