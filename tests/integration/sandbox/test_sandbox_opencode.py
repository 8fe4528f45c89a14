"""OpenCode and ripgrep in real sandboxes of both backends: the pinned builds on the sandbox's
PATH (so OpenCode finds `rg` and downloads none), and not writable by the sandbox user."""

from __future__ import annotations

import pytest

from mosoo_core.runtime.sandbox import SandboxBackend, SandboxRef
from mosoo_core.runtime.sandbox.image import OPENCODE_VERSION, RIPGREP_VERSION, opencode_package

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_opencode_and_rg_run_from_the_sandbox_path_and_are_read_only(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    if opencode_package() is None:
        pytest.skip("no OpenCode is pinned for this architecture")
    script = (
        "command -v opencode rg; HOME=$(mktemp -d) opencode --version; rg --version | head -n 1;"
        " find /opt/mosoo/opencode -perm /022 -print; test -w /opt/mosoo/opencode/bin || echo ro"
    )
    result = backend.exec(sandbox, ["bash", "-lc", script], timeout=120)
    assert result.exit_code == 0, (result.stdout_text, result.stderr_text)
    lines = result.stdout_text.splitlines()
    assert lines[:3] == [
        "/opt/mosoo/opencode/bin/opencode",
        "/opt/mosoo/opencode/bin/rg",
        OPENCODE_VERSION,
    ]
    assert lines[3].startswith(f"ripgrep {RIPGREP_VERSION} ")
    assert lines[4:] == ["ro"]
