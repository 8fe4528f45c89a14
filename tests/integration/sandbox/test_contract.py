"""The sandbox contract (ARCHITECTURE.md section 4), against the docker and process backends."""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from driver.protocol import PROTOCOL_VERSION
from mosoo_core.runtime.sandbox import (
    ATTACHMENTS_DIR,
    BOOT_PAYLOAD,
    CONTROL_DIR,
    CONTROL_SOCKET,
    LABEL_APP,
    LABEL_SUBJECT,
    SANDBOX_UID,
    WORKSPACE,
    Mount,
    SandboxBackend,
    SandboxError,
    SandboxRef,
)
from mosoo_core.runtime.sandbox._cgroups import cgroup_dirs_for
from tests.integration.sandbox.conftest import RUN_LABEL, EchoSocket, MakeSandbox
from tests.support.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _sh(backend: SandboxBackend, ref: SandboxRef, script: str, **kwargs: object) -> str:
    result = backend.exec(ref, ["sh", "-c", script], timeout=60, **kwargs)  # type: ignore[arg-type]
    assert result.exit_code == 0, (result.exit_code, result.stdout_text, result.stderr_text)
    return result.stdout_text


def test_commands_run_in_workspace_as_the_non_root_sandbox_user(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    assert backend.exec(sandbox, ["pwd"]).stdout_text.strip() == WORKSPACE
    assert backend.exec(sandbox, ["id", "-u"]).stdout_text.strip() == str(SANDBOX_UID)
    assert backend.exec(sandbox, ["id", "-un"]).stdout_text.strip() == "mosoo"


def test_exec_returns_exit_code_stdout_and_stderr_separately_and_honours_env_and_workdir(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    result = backend.exec(
        sandbox,
        ["sh", "-c", 'echo "out $GREETING $(pwd)"; echo err >&2; exit 7'],
        env={"GREETING": "hello"},
        workdir="/tmp",
    )
    assert result.exit_code == 7
    assert result.stdout == b"out hello /tmp\n"
    assert result.stderr == b"err\n"
    assert not result.timed_out


def test_exec_feeds_stdin_to_the_command(backend: SandboxBackend, sandbox: SandboxRef) -> None:
    data = bytes(range(256)) * 2048  # 512 KiB, every byte value
    result = backend.exec(sandbox, ["sha256sum"], stdin=data, timeout=60)
    assert result.stdout_text.split()[0] == hashlib.sha256(data).hexdigest()


def test_processes_have_no_capabilities_cannot_gain_privileges_and_see_a_read_only_root(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    status = dict(
        line.split(":\t", 1)
        for line in backend.exec(sandbox, ["cat", "/proc/self/status"]).stdout_text.splitlines()
        if ":\t" in line
    )
    assert int(status["CapEff"], 16) == 0
    assert int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    for path in ("/usr/bin/planted", "/etc/planted", "/planted"):
        assert backend.exec(sandbox, ["touch", path]).exit_code != 0, path
    _sh(backend, sandbox, "touch /tmp/scratch /workspace/file")


def test_put_file_writes_with_the_given_mode_as_the_sandbox_user(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    payload = b'{"boot_token": "one-time"}'
    backend.put_file(sandbox, BOOT_PAYLOAD, payload, 0o600)
    backend.put_file(sandbox, f"{WORKSPACE}/readme.md", b"# hi\n", 0o644)

    assert backend.exec(sandbox, ["cat", BOOT_PAYLOAD]).stdout == payload
    assert _sh(backend, sandbox, f"stat -c '%a %u' {BOOT_PAYLOAD}").split() == [
        "600",
        str(SANDBOX_UID),
    ]
    assert _sh(backend, sandbox, "stat -c '%a %u' /workspace/readme.md").split() == [
        "644",
        str(SANDBOX_UID),
    ]
    # The driver deletes the payload after reading it: the boot dir is the sandbox user's.
    _sh(backend, sandbox, f"rm {BOOT_PAYLOAD}")


def test_workspace_round_trips_through_an_archive_into_a_fresh_sandbox(
    backend: SandboxBackend, make_sandbox: MakeSandbox
) -> None:
    first = make_sandbox()
    _sh(
        backend,
        first,
        "mkdir -p memory/deep/er outputs && echo remember > memory/deep/er/note.txt"
        " && head -c 3000000 /dev/urandom > outputs/blob.bin && printf '#!/bin/sh\\necho run\\n' > tool.sh"
        " && chmod 0750 tool.sh && ln -s memory/deep/er/note.txt link && mkdir empty",
    )
    listing = (
        "find . -printf '%p %y %m\\n' | sort && sha256sum outputs/blob.bin memory/deep/er/note.txt"
    )
    before = _sh(backend, first, listing)

    chunks = backend.get_archive(first, WORKSPACE)
    assert not isinstance(chunks, bytes | bytearray)  # a stream, not the whole tree at once
    checkpoint = b"".join(chunks)
    with tarfile.open(fileobj=io.BytesIO(checkpoint)) as archive:
        names = archive.getnames()
    assert "./memory/deep/er/note.txt" in names
    assert all(not name.startswith(("/", "..")) for name in names)
    backend.remove(first)

    second = make_sandbox()
    backend.put_archive(second, WORKSPACE, iter([checkpoint[:100_000], checkpoint[100_000:]]))
    assert _sh(backend, second, listing) == before
    assert _sh(backend, second, "./tool.sh && cat link") == "run\nremember\n"
    assert _sh(backend, second, "stat -c %u memory/deep/er/note.txt").strip() == str(SANDBOX_UID)


def test_get_archive_streams_in_chunks(backend: SandboxBackend, sandbox: SandboxRef) -> None:
    _sh(backend, sandbox, "head -c 8000000 /dev/zero > big")
    sizes = [len(chunk) for chunk in backend.get_archive(sandbox, WORKSPACE)]
    assert len(sizes) > 1
    assert max(sizes) <= 1024 * 1024
    assert sum(sizes) > 8_000_000


def test_get_archive_of_a_missing_directory_raises(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    with pytest.raises(SandboxError):
        b"".join(backend.get_archive(sandbox, "/workspace/nope"))


def test_a_hostile_archive_stays_inside_the_target_directory(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in ("../escaped", "/absolute", "ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            archive.addfile(info, io.BytesIO(b"x\n"))
    with pytest.raises(SandboxError):  # GNU tar refuses `..` members and says so
        backend.put_archive(sandbox, f"{WORKSPACE}/restore", buffer.getvalue())
    outside = backend.exec(
        sandbox, ["sh", "-c", "ls /escaped /workspace/escaped /absolute 2>/dev/null"]
    )
    assert outside.stdout == b""
    assert _sh(backend, sandbox, "cat restore/ok.txt") == "x\n"


_DIAL_CONTROL = (
    "import socket\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    f"s.connect({CONTROL_SOCKET!r})\n"
    "s.sendall(b'hello')\n"
    "print(s.recv(100).decode())\n"
)


def test_the_control_socket_on_the_host_is_reachable_from_inside(
    backend: SandboxBackend, make_sandbox: MakeSandbox, echo_socket: Path
) -> None:
    ref = make_sandbox(control_socket=echo_socket)
    result = backend.exec(ref, ["python3", "-c", _DIAL_CONTROL], timeout=30)
    assert (result.exit_code, result.stdout_text) == (0, "echo:hello\n"), result.stderr_text
    # Its directory is what is mounted, read-only: the sandbox user can traverse it, not write.
    assert f"{CONTROL_DIR}/control.sock" == CONTROL_SOCKET
    assert _sh(backend, ref, f"ls {CONTROL_DIR}") == "control.sock\n"
    assert backend.exec(ref, ["touch", f"{CONTROL_DIR}/other"]).exit_code != 0
    assert backend.exec(ref, ["rm", "-f", CONTROL_SOCKET]).exit_code != 0


def test_a_restarted_control_socket_is_reachable_from_a_running_sandbox(
    backend: SandboxBackend, make_sandbox: MakeSandbox, echo_server: EchoSocket
) -> None:
    ref = make_sandbox(control_socket=echo_server.path)
    first = backend.exec(ref, ["python3", "-c", _DIAL_CONTROL], timeout=30)
    assert (first.exit_code, first.stdout_text) == (0, "echo:hello\n"), first.stderr_text
    echo_server.restart(prefix=b"again:")  # unlink + bind: a new inode at the same path
    second = backend.exec(ref, ["python3", "-c", _DIAL_CONTROL], timeout=30)
    assert (second.exit_code, second.stdout_text) == (0, "again:hello\n"), second.stderr_text


def test_a_control_socket_not_named_control_sock_is_refused(
    backend: SandboxBackend, make_sandbox: MakeSandbox, sandbox_tmp: Path
) -> None:
    directory = Path(tempfile.mkdtemp(dir=sandbox_tmp))
    other = directory / "other.sock"
    other.touch()
    with pytest.raises(SandboxError, match=r"named control\.sock"):
        make_sandbox(control_socket=other)
    with pytest.raises(SandboxError, match="does not exist"):
        make_sandbox(control_socket=directory / "control.sock")


def test_attachments_are_mounted_read_only(
    backend: SandboxBackend, make_sandbox: MakeSandbox, sandbox_tmp: Path
) -> None:
    attachment = Path(tempfile.mkdtemp(dir=sandbox_tmp))
    attachment.chmod(0o755)
    (attachment / "report.csv").write_text("a,b\n1,2\n")
    (attachment / "report.csv").chmod(0o644)
    target = f"{ATTACHMENTS_DIR}/file_1"
    ref = make_sandbox(mounts=(Mount(attachment, target),))

    assert _sh(backend, ref, f"cat {target}/report.csv") == "a,b\n1,2\n"
    assert backend.exec(ref, ["sh", "-c", f"echo x >> {target}/report.csv"]).exit_code != 0
    assert backend.exec(ref, ["touch", f"{target}/new"]).exit_code != 0
    assert (attachment / "report.csv").read_text() == "a,b\n1,2\n"


def test_skills_are_mounted_read_only_below_the_read_only_runtime(
    backend: SandboxBackend, make_sandbox: MakeSandbox, sandbox_tmp: Path
) -> None:
    # /opt/mosoo is the runtime (read-only, and on the process backend a bind of a host
    # directory without these folders): each skill still gets its own mount point there.
    mounts = []
    for name in ("release-notes", "changelog"):
        folder = Path(tempfile.mkdtemp(dir=sandbox_tmp))
        (folder / "SKILL.md").write_text(f"---\nname: {name}\n---\n")
        (folder / "SKILL.md").chmod(0o444)
        folder.chmod(0o555)
        mounts.append(Mount(folder, f"/opt/mosoo/skills/{name}"))
    ref = make_sandbox(mounts=tuple(mounts))

    assert (
        _sh(backend, ref, "cat /opt/mosoo/skills/changelog/SKILL.md")
        == "---\nname: changelog\n---\n"
    )
    assert _sh(backend, ref, "ls /opt/mosoo/skills").split() == ["changelog", "release-notes"]
    for command in (
        "touch /opt/mosoo/skills/changelog/new",
        "mkdir /opt/mosoo/skills/other",
        "touch /opt/mosoo/new",
    ):
        assert backend.exec(ref, ["sh", "-c", command]).exit_code != 0, command
    # Without skills the runtime's folder is there, empty.
    assert _sh(backend, make_sandbox(), "ls -A /opt/mosoo/skills") == ""


def test_there_is_no_network_but_loopback(backend: SandboxBackend, sandbox: SandboxRef) -> None:
    # No route exists, so connect fails before any packet is sent.
    script = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"
    started = time.monotonic()
    result = backend.exec(sandbox, ["python3", "-c", script], timeout=30)
    assert result.exit_code != 0
    assert "Network is unreachable" in result.stderr_text
    assert time.monotonic() - started < 2
    interfaces = backend.exec(
        sandbox, ["python3", "-c", "import socket; print([n for _, n in socket.if_nameindex()])"]
    )
    assert interfaces.stdout_text.strip() == "['lo']"


def test_the_driver_package_and_its_requirements_are_installed(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    script = "import driver.protocol, pydantic; print(driver.protocol.PROTOCOL_VERSION)"
    result = backend.exec(sandbox, ["python3", "-c", script], timeout=60)
    # The sandbox's driver speaks the protocol of this checkout (the image is built from it).
    assert (result.exit_code, result.stdout_text) == (0, f"{PROTOCOL_VERSION}\n"), (
        result.stderr_text
    )
    assert _sh(backend, sandbox, "command -v mosoo-driver").strip() == "/opt/mosoo/bin/mosoo-driver"


def test_start_driver_runs_mosoo_driver_which_reads_and_deletes_the_boot_payload(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    _start_the_driver_and_see_it_take_its_payload(backend, sandbox)


def _start_the_driver_and_see_it_take_its_payload(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    # Not a valid payload: the driver still deletes it at once and exits, which is enough to
    # show it started, as the sandbox user, with MOSOO_DRIVER_BOOT_PAYLOAD_FILE pointing here.
    backend.put_file(sandbox, BOOT_PAYLOAD, b"{}", 0o600)
    backend.start_driver(sandbox)
    wait_for(
        lambda: backend.exec(sandbox, ["test", "-e", BOOT_PAYLOAD]).exit_code != 0,
        30,
        "the driver to delete its boot payload",
    )


def test_a_driver_package_planted_in_the_workspace_is_never_what_the_driver_runs(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    """The workspace outlives runs (a Pet's serves every thread), and the agent writes it: a
    `driver` package there must not shadow the real one when the next run's driver starts,
    or one thread's agent would run as the driver of every later run, with its token."""
    planted = (
        "mkdir -p driver && "
        'printf \'open("/workspace/hijacked", "w").close()\\n\' > driver/__init__.py && '
        "touch driver/main.py"
    )
    _sh(backend, sandbox, planted)
    # The real driver deletes its payload at once; the planted one would not get that far.
    _start_the_driver_and_see_it_take_its_payload(backend, sandbox)
    assert backend.exec(sandbox, ["test", "-e", f"{WORKSPACE}/hijacked"]).exit_code != 0


def test_list_by_label_finds_exactly_the_matching_sandboxes(
    backend: SandboxBackend, make_sandbox: MakeSandbox, test_run_id: str
) -> None:
    pet = make_sandbox(subject="agent:a1", labels={"mosoo.test_case": "list"})
    cattle = make_sandbox(subject="session:s1", labels={"mosoo.test_case": "list"})
    mine = {RUN_LABEL: test_run_id, "mosoo.test_case": "list"}

    assert {ref.name for ref in backend.list_by_label(mine)} == {pet.name, cattle.name}
    found = backend.list_by_label({**mine, LABEL_SUBJECT: "agent:a1"})
    assert [ref.name for ref in found] == [pet.name]
    assert found[0].labels[LABEL_APP] == "app_test"
    assert backend.list_by_label({**mine, LABEL_SUBJECT: "agent:nobody"}) == []


def test_a_detached_process_runs_until_stop_and_the_workspace_outlives_it(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    backend.start_process(
        sandbox,
        # Written aside and renamed, so a reader (or a kill) never meets a half-written beat.
        [
            "sh",
            "-c",
            "while :; do date +%s%N > /workspace/.beat && mv /workspace/.beat /workspace/beat; sleep 0.05; done",
        ],
    )
    beats = lambda: backend.exec(sandbox, ["cat", "/workspace/beat"]).stdout  # noqa: E731
    wait_for(
        lambda: backend.exec(sandbox, ["test", "-s", "/workspace/beat"]).exit_code == 0,
        20,
        "a first beat",
    )
    first = beats()
    wait_for(lambda: beats() != first, 20, "the detached process to keep beating")

    backend.stop(sandbox)
    with pytest.raises(SandboxError):
        backend.exec(sandbox, ["true"])
    backend.start(sandbox)
    last = beats()
    assert last  # /workspace survived stop and start
    time.sleep(0.5)  # ten beats' worth: none may come, the process is gone
    assert beats() == last


def test_exec_timeout_kills_the_command_and_everything_it_started(
    backend: SandboxBackend, sandbox: SandboxRef
) -> None:
    started = time.monotonic()
    result = backend.exec(
        sandbox, ["sh", "-c", "(sleep 2; touch /workspace/late) & sleep 60"], timeout=1
    )
    assert result.timed_out
    assert time.monotonic() - started < 15
    time.sleep(2.5)  # past the moment the background child would have written
    assert backend.exec(sandbox, ["test", "-e", "/workspace/late"]).exit_code != 0


def test_remove_leaves_nothing_behind_and_can_be_repeated(
    backend: SandboxBackend, make_sandbox: MakeSandbox, test_run_id: str
) -> None:
    ref = make_sandbox(labels={"mosoo.test_case": "remove"})
    backend.start_process(ref, ["sleep", "1000"])
    backend.remove(ref)
    backend.remove(ref)

    assert backend.list_by_label({RUN_LABEL: test_run_id, "mosoo.test_case": "remove"}) == []
    with pytest.raises(SandboxError):
        backend.exec(ref, ["true"])
    if backend.name == "docker":
        client = backend.client  # type: ignore[attr-defined]
        assert client.containers.list(all=True, filters={"name": ref.name}) == []
        assert client.volumes.list(filters={"name": ref.name}) == []
    else:
        assert not (backend.root / ref.name).exists()  # type: ignore[attr-defined]
        assert not [d for d in cgroup_dirs_for(ref.name) if d.exists()]
    # Nothing of the sandbox is still running anywhere on the host.
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert b"sleep\x001000" not in cmdline.read_bytes()
        except OSError:
            continue
