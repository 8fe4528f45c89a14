"""What `docker inspect` shows for a sandbox container: every hardening flag of
ARCHITECTURE.md section 4, and no way to the Docker engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from mosoo_core.runtime.sandbox import (
    BOOT_DIR,
    CONTROL_DIR,
    LABEL_APP,
    LABEL_DRIVER_INSTANCE,
    LABEL_SANDBOX,
    LABEL_SUBJECT,
    WORKSPACE,
    SandboxSpec,
)
from mosoo_core.runtime.sandbox.docker_backend import DockerBackend
from tests.integration.sandbox.conftest import RUN_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_a_docker_sandbox_is_created_hardened_with_defaults_from_the_backend(
    docker_backend: DockerBackend, test_run_id: str, echo_socket: Path
) -> None:
    spec = SandboxSpec(
        subject="agent:agt_1",
        app_id="app_1",
        driver_instance_id="drv_1",
        control_socket=echo_socket,
        labels={"mosoo.test": "1", RUN_LABEL: test_run_id},
    )
    ref = docker_backend.create(spec)
    try:
        attrs = docker_backend.client.api.inspect_container(ref.id)
        host, config = attrs["HostConfig"], attrs["Config"]

        assert host["CapDrop"] == ["ALL"]
        assert not host["CapAdd"]
        assert host["Privileged"] is False
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert not [
            option for option in host["SecurityOpt"] if "seccomp" in option
        ]  # default profile on
        assert host["PidsLimit"] == 256
        assert host["Memory"] == 1024 * 1024 * 1024
        assert host["MemorySwap"] == host["Memory"]  # no swap on top
        assert host["NanoCpus"] == 1_000_000_000
        assert host["NetworkMode"] == "none"
        assert host["ReadonlyRootfs"] is True
        assert host["Init"] is True
        assert config["User"] == "10001:10001"
        assert config["WorkingDir"] == WORKSPACE
        assert config["Labels"][LABEL_SANDBOX] == "1"
        assert config["Labels"][LABEL_SUBJECT] == "agent:agt_1"
        assert config["Labels"][LABEL_APP] == "app_1"
        assert config["Labels"][LABEL_DRIVER_INSTANCE] == "drv_1"

        mounts = {mount["Destination"]: mount for mount in attrs["Mounts"]}
        assert mounts[WORKSPACE]["Type"] == "volume"
        # The socket's directory, read-only (a file mount would keep a dead inode across
        # control restarts).
        assert mounts[CONTROL_DIR]["Type"] == "bind"
        assert mounts[CONTROL_DIR]["Source"] == str(echo_socket.parent)
        assert mounts[CONTROL_DIR]["RW"] is False
        assert set(mounts) == {WORKSPACE, CONTROL_DIR}
        assert not [m for m in attrs["Mounts"] if m.get("Source", "").endswith("docker.sock")]
        assert not host.get("Binds")
        assert set(host["Tmpfs"]) == {"/tmp", BOOT_DIR}

        # From inside: no engine socket anywhere, and pid 1 is Docker's init, not our code.
        probe = docker_backend.exec(
            ref,
            ["sh", "-c", "ls /var/run/docker.sock /run/docker.sock 2>/dev/null; cat /proc/1/comm"],
        )
        assert probe.stdout_text == "docker-init\n"
    finally:
        docker_backend.remove(ref)
