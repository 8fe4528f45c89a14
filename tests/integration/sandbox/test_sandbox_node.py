"""Node.js and npm in real sandboxes of both backends, as the agent's bash tool sees them
(`bash -lc`, the sandbox user): the pinned versions, the sandbox's PATH kept by login shells,
and /opt/mosoo/node and /opt/mosoo/npm readable but not writable."""

from __future__ import annotations

from pathlib import Path

import pytest

from mosoo_core.runtime.sandbox import SANDBOX_UID, Mount, SandboxBackend, SandboxRef
from mosoo_core.runtime.sandbox._base import SANDBOX_PATH
from mosoo_core.runtime.sandbox.image import NODE_VERSION, NPM_VERSION
from tests.integration.sandbox.conftest import MakeSandbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_a_login_shell_runs_node_npm_and_python_with_the_sandbox_path(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    script = (
        'node -e "console.log(1+1)"; npm --version; python -c "print(3)"; echo $PATH; '
        "node --version; npx --version; command -v node npm; id -u; echo $NODE_PATH"
    )
    result = backend.exec(sandbox, ["bash", "-lc", script], timeout=120)
    assert result.exit_code == 0, (result.stdout_text, result.stderr_text)
    assert result.stdout_text.splitlines() == [
        "2",
        NPM_VERSION,
        "3",
        SANDBOX_PATH,
        f"v{NODE_VERSION}",
        NPM_VERSION,
        "/opt/mosoo/node/bin/node",  # ours, also where the host has a Node under /usr
        "/opt/mosoo/node/bin/npm",
        str(SANDBOX_UID),
        "/opt/mosoo/env/node/node_modules",
    ]


def test_node_runs_without_a_shell_from_the_sandbox_path(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    result = backend.exec(sandbox, ["node", "-p", "process.execPath"], timeout=60)
    assert result.exit_code == 0, result.stderr_text
    assert result.stdout_text.strip() == "/opt/mosoo/node/bin/node"


def test_node_and_npm_are_not_writable_by_the_sandbox_user(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    # Nothing owned by the sandbox user or writable by group / others, and writes fail.
    found = backend.exec(
        sandbox,
        [
            "find",
            "/opt/mosoo/node",
            "/opt/mosoo/npm",
            "(",
            "-user",
            str(SANDBOX_UID),
            "-o",
            "-perm",
            "/022",
            ")",
            "-print",
        ],
        timeout=60,
    )
    assert found.exit_code == 0 and found.stdout_text == "", found.stdout_text[:2000]
    for target in ("/opt/mosoo/node/bin/node", "/opt/mosoo/npm/bin/npm-cli.js"):
        assert backend.exec(sandbox, ["sh", "-c", f"echo x >> {target}"]).exit_code != 0
    for directory in ("/opt/mosoo/node/bin", "/opt/mosoo/npm/lib"):
        assert backend.exec(sandbox, ["touch", f"{directory}/added"]).exit_code != 0
    assert backend.exec(sandbox, ["test", "-w", "/opt/mosoo/node/bin"]).exit_code != 0


def test_an_environment_layer_at_opt_mosoo_env_is_found_by_node_and_the_path(
    backend: SandboxBackend, make_sandbox: MakeSandbox, sandbox_tmp: Path
) -> None:
    # As an environment with packages mounts them: node_modules for NODE_PATH and .bin, a
    # pip target with bin/ (its PYTHONPATH is the environments' business, not the image's).
    layer = sandbox_tmp / f"env-{backend.name}"
    package = layer / "node" / "node_modules" / "hello-mosoo"
    package.mkdir(parents=True)
    (package / "index.js").write_text("module.exports = 'hello from the layer'\n")
    (package / "package.json").write_text('{"name": "hello-mosoo", "main": "index.js"}\n')
    (layer / "node" / "node_modules" / ".bin").mkdir()
    (layer / "python" / "bin").mkdir(parents=True)
    for command, text in (
        (layer / "node" / "node_modules" / ".bin" / "hello-node", "echo node bin"),
        (layer / "python" / "bin" / "hello-python", "echo python bin"),
    ):
        command.write_text(f"#!/bin/sh\n{text}\n")
    for path in [layer, *layer.rglob("*")]:
        path.chmod(0o755)
    ref = make_sandbox(mounts=(Mount(layer, "/opt/mosoo/env"),))
    script = "node -p 'require(\"hello-mosoo\")'; hello-node; hello-python"
    result = backend.exec(ref, ["bash", "-lc", script], timeout=60)
    assert result.exit_code == 0, (result.stdout_text, result.stderr_text)
    assert result.stdout_text.splitlines() == ["hello from the layer", "node bin", "python bin"]
