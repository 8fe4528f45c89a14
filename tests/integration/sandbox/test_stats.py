"""What a sandbox uses (the Assistant's Sandbox panel), on both backends: a busy process shows
as CPU and memory use, and a stopped sandbox has no use to show; a removed one is not found."""

from __future__ import annotations

import pytest

from mosoo_core.runtime.sandbox import SandboxBackend, SandboxNotFound
from tests.integration.sandbox.conftest import MakeSandbox
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_a_busy_sandbox_shows_cpu_and_memory_use(
    backend: SandboxBackend, make_sandbox: MakeSandbox
) -> None:
    sandbox = make_sandbox()
    # Holds 32 MiB in /tmp (a tmpfs: memory, on both backends) and keeps one CPU busy.
    busy = "head -c 33554432 /dev/zero > /tmp/held && touch ready; while :; do :; done"
    backend.start_process(sandbox, ["sh", "-c", busy])
    wait_for(lambda: backend.exec(sandbox, ["test", "-e", "ready"]).exit_code == 0, 30, "ready")

    stats = backend.stats(sandbox)

    assert stats.started_at is not None
    assert stats.cpu_percent is not None and stats.cpu_percent > 10
    assert stats.memory_bytes is not None and stats.memory_bytes > 16 * 1024 * 1024
    assert stats.memory_limit_bytes == backend.limits.memory_mb * 1024 * 1024
    backend.stop(sandbox)
    stopped = backend.stats(sandbox)
    assert stopped.cpu_percent is None or stopped.cpu_percent == 0
    backend.remove(sandbox)
    with pytest.raises(SandboxNotFound):
        backend.stats(sandbox)
