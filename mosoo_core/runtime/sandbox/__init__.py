"""Sandboxes: where drivers run. One interface (`SandboxBackend`), two backends: `docker`
(default where an engine answers) and `process` (bubblewrap). See ARCHITECTURE.md section 4.

    backend = get_backend()
    ref = backend.create(SandboxSpec(subject="session:...", app_id="...", control_socket=path))
    backend.put_file(ref, BOOT_PAYLOAD, payload_json, 0o600)
    backend.start_driver(ref)
    ...
    checkpoint = backend.get_archive(ref, WORKSPACE)   # a tar stream
    backend.remove(ref)
"""

from __future__ import annotations

import threading

from mosoo_core.runtime.sandbox._base import (
    ATTACHMENTS_DIR,
    BOOT_DIR,
    BOOT_PAYLOAD,
    BOOT_PAYLOAD_ENV,
    CONTROL_DIR,
    CONTROL_SOCKET,
    CONTROL_URL,
    DRIVER_COMMAND,
    LABEL_APP,
    LABEL_DRIVER_INSTANCE,
    LABEL_SANDBOX,
    LABEL_SUBJECT,
    SANDBOX_GID,
    SANDBOX_UID,
    SANDBOX_USER,
    TERMINAL_MARKER_ENV,
    WORKSPACE,
    ExecResult,
    Limits,
    Mount,
    NetworkPolicy,
    SandboxBackend,
    SandboxError,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    SandboxStats,
    TerminalProcess,
    remove_read_only_tree,
)
from mosoo_core.settings import Settings, get_settings

_backends: dict[tuple[object, ...], SandboxBackend] = {}
_backends_lock = threading.Lock()


def _docker_client() -> object | None:
    try:
        import docker

        client: object = docker.from_env(timeout=120)
        client.ping()  # type: ignore[attr-defined]  # docker ships no type hints
        return client
    except Exception:
        return None


def get_backend(settings: Settings | None = None) -> SandboxBackend:
    """The configured backend: `docker`, `process`, or `auto` (docker when an engine
    answers, else process). One instance per configuration and process (it holds the Docker
    client and the resolved image)."""
    settings = settings or get_settings()
    key = (
        settings.sandbox_backend,
        settings.sandbox_image,
        settings.sandbox_base_image,
        settings.sandbox_memory_mb,
        settings.sandbox_cpus,
        settings.sandbox_pids_limit,
        str(settings.data_dir.resolve()),
    )
    with _backends_lock:
        if key not in _backends:
            _backends[key] = _make_backend(settings)
        return _backends[key]


def _make_backend(settings: Settings) -> SandboxBackend:
    limits = Limits(
        memory_mb=settings.sandbox_memory_mb,
        cpus=settings.sandbox_cpus,
        pids_limit=settings.sandbox_pids_limit,
    )
    if settings.sandbox_backend in ("auto", "docker"):
        client = _docker_client()
        if client is not None:
            # Imported on use: the docker SDK (and requests) load only where sandboxes run.
            from mosoo_core.runtime.sandbox.docker_backend import DockerBackend

            return DockerBackend(
                client,
                image=settings.sandbox_image,
                base_image=settings.sandbox_base_image,
                limits=limits,
                attachments_root=settings.data_dir.resolve() / "sandbox-attachments",
            )
        if settings.sandbox_backend == "docker":
            raise SandboxError("MOSOO_SANDBOX_BACKEND=docker but no Docker engine answers")
    # Imported on use, like the Docker backend: only one of them is ever needed.
    from mosoo_core.runtime.sandbox.process_backend import ProcessBackend

    data_dir = settings.data_dir.resolve()
    return ProcessBackend(
        data_dir / "sandboxes", runtime_parent=data_dir / "sandbox-runtime", limits=limits
    )


__all__ = [
    "ATTACHMENTS_DIR",
    "BOOT_DIR",
    "BOOT_PAYLOAD",
    "BOOT_PAYLOAD_ENV",
    "CONTROL_DIR",
    "CONTROL_SOCKET",
    "CONTROL_URL",
    "DRIVER_COMMAND",
    "LABEL_APP",
    "LABEL_DRIVER_INSTANCE",
    "LABEL_SANDBOX",
    "LABEL_SUBJECT",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SANDBOX_USER",
    "TERMINAL_MARKER_ENV",
    "WORKSPACE",
    "ExecResult",
    "Limits",
    "Mount",
    "NetworkPolicy",
    "SandboxBackend",
    "SandboxError",
    "SandboxNotFound",
    "SandboxRef",
    "SandboxSpec",
    "SandboxStats",
    "TerminalProcess",
    "get_backend",
    "remove_read_only_tree",
]
