"""Package builds: install a revision's packages once into a layer every run mounts.

A layer is a host directory, `<data>/environments/<packages hash>/<attempt>`, mounted
read-only at /opt/mosoo/env in each sandbox of a revision with those packages. A directory
rather than a derived image: both backends (Docker and bubblewrap) mount one the same way
(as they mount attachments), a layer is shared by every revision with the same packages, and
collecting it is deleting a directory. Each attempt writes a directory of its own, so a
Rebuild never changes files under a sandbox still running on the previous one.

The build runs `python -m driver.build` in a build sandbox: no network but control's egress
proxy, which lets the build's grant reach the configured package indexes and nothing else.
Its log is a file in the layer that the worker copies to the build's row while it grows (the
Environments page shows it live), then moves out of the layer.

A run whose revision has packages waits here before its sandbox is created: a ready layer is
mounted at once; a queued build is built by the run's own worker (so a worker busy with the
run never waits for a build task queued behind it); a build in progress elsewhere is waited
for; a failed build fails the run with its log's tail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlmodel import Session

from driver.protocol import EGRESS_GRANT_ENV, ENVIRONMENT_LAYER, BuildJob
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.environments import builds
from mosoo_core.logs import get_logger
from mosoo_core.runtime.labels import LABEL_BUILD, LABEL_ENV_LAYER, installation_label
from mosoo_core.runtime.sandbox import (
    SANDBOX_GID,
    SANDBOX_UID,
    ExecResult,
    Mount,
    SandboxBackend,
    SandboxError,
    SandboxSpec,
    get_backend,
)
from mosoo_core.settings import get_settings

log = get_logger(__name__)

BUILD_SUBJECT_PREFIX = "build:"
LOG_POLL_SECONDS = 1.0  # how often the growing log is copied to the database
WAIT_POLL_SECONDS = 0.5  # how often a run waiting for another worker's build looks again
# A builder renews its row with every log copy; one silent for this long is taken to be dead.
STALE_AFTER_SECONDS = 120.0


@dataclass(frozen=True)
class LayerOutcome:
    """What a run gets: the layer to mount, or why it cannot run ("stopped" when the run
    was stopped while it waited)."""

    path: Path | None = None
    layer: str = ""  # "<hash>/<attempt>", the label of sandboxes mounting it
    failure: str = ""
    stopped: bool = False


def layer_mount(path: Path) -> Mount:
    return Mount(source=path, target=ENVIRONMENT_LAYER, read_only=True)


def build_packages(packages_hash: str, backend: SandboxBackend | None = None) -> str:
    """Build these packages if nobody is building them (the build task). Returns the build's
    status afterwards, or "missing" when no build of them is recorded."""
    with session_scope() as db:
        grant = builds.claim_build(db, packages_hash, stale_after=STALE_AFTER_SECONDS)
    if grant is not None:
        _run_build(packages_hash, grant, backend or get_backend())
    with session_scope() as db:
        row = builds.get_build(db, packages_hash)
        return row.status if row else "missing"


def _writable_by_sandbox(path: Path) -> None:
    path.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(path, SANDBOX_UID, SANDBOX_GID)
    else:  # the Docker sandbox user is not us: let it write; the run mounts it read-only
        path.chmod(0o777)


def _read_log(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - builds.LOG_CHARS))
            return handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _seal(path: Path) -> None:
    """Nothing in a ready layer stays writable (it is mounted read-only as well). Only root
    may change the modes of files the sandbox user wrote; the read-only mount is enough."""
    if os.geteuid() != 0:
        return
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            entry = Path(root) / name
            if not entry.is_symlink():
                mode = entry.stat().st_mode
                entry.chmod(mode & ~0o222 | 0o444 | (0o111 if mode & 0o100 else 0))
    path.chmod(0o555)


def _exec_in_thread(call: Callable[[], ExecResult]) -> tuple[threading.Thread, dict[str, object]]:
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except Exception as error:  # reported by the builder, like a failed exit
            box["error"] = error

    thread = threading.Thread(target=target, name="environment build", daemon=True)
    thread.start()
    return thread, box


def _run_build(packages_hash: str, grant: str, backend: SandboxBackend) -> None:
    settings = get_settings()
    with session_scope() as db:
        row = builds.get_build(db, packages_hash)
        assert row is not None
        packages, attempt = dict(row.packages or {}), row.attempts
    job = BuildJob(
        pip=list(packages.get("pip", [])),
        npm=list(packages.get("npm", [])),
        pip_index_url=settings.pip_index_url,
        npm_registry=settings.npm_registry,
    )
    root = builds.layers_root() / packages_hash
    work = root / f"{attempt}.partial"
    shutil.rmtree(work, ignore_errors=True)
    _writable_by_sandbox(work)
    log_file = work / job.log_name
    started = time.monotonic()
    timeout = settings.build_timeout_seconds
    text, error, ref = "", "", None
    log.info("environment.build_started", packages_hash=packages_hash[:12], attempt=attempt)
    try:
        ref = backend.create(
            SandboxSpec(
                subject=f"{BUILD_SUBJECT_PREFIX}{packages_hash[:24]}",
                app_id="",
                control_socket=settings.resolved_control_socket,
                mounts=(Mount(source=work, target=ENVIRONMENT_LAYER, read_only=False),),
                labels={**installation_label(), LABEL_BUILD: packages_hash},
            )
        )
        sandbox = ref
        thread, box = _exec_in_thread(
            lambda: backend.exec(
                sandbox,
                ["python3", "-m", "driver.build"],
                env={EGRESS_GRANT_ENV: grant},
                stdin=job.model_dump_json().encode(),
                timeout=timeout,
            )
        )
        copied = ""
        while thread.is_alive():
            thread.join(LOG_POLL_SECONDS)
            text = _read_log(log_file)
            if text != copied or thread.is_alive():
                with session_scope() as db:
                    builds.record_log(db, packages_hash, grant, text)
                copied = text
        text = _read_log(log_file)
        result = box.get("result")
        if isinstance(result, ExecResult):
            # What driver.build itself printed (a traceback, a missing option) goes last.
            extra = (result.stdout_text + result.stderr_text).strip()
            text = f"{text}\n{extra}\n" if extra else text
            if result.timed_out:
                error = f"The build did not finish within {timeout:g} seconds."
            elif result.exit_code != 0:
                error = f"Installing the packages failed (exit status {result.exit_code})."
        else:
            error = f"The build sandbox failed: {str(box.get('error', 'no result'))[:300]}"
    except SandboxError as failure:
        error = f"The build sandbox could not start: {failure.message[:300]}"
    finally:
        if ref is not None:
            with contextlib.suppress(SandboxError):
                backend.remove(ref)
    layer = f"{packages_hash}/{attempt}"
    if not error:
        log_file.unlink(missing_ok=True)
        final = root / str(attempt)
        shutil.rmtree(final, ignore_errors=True)
        _seal(work)
        work.rename(final)
    else:
        _remove_tree(work)
    with session_scope() as db:
        kept = builds.finish_build(db, packages_hash, grant, layer=layer, log=text, error=error)
    log.info(
        "environment.build_finished",
        packages_hash=packages_hash[:12],
        attempt=attempt,
        ok=not error,
        recorded=kept,
        seconds=round(time.monotonic() - started, 1),
    )


def await_layer(
    packages_hash: str,
    packages: dict[str, list[str]],
    *,
    backend: SandboxBackend,
    still_wanted: Callable[[], bool],
    on_wait: Callable[[str], None],
) -> LayerOutcome:
    """The ready layer of these packages, building it here when it is queued. `on_wait` is
    told each new status while the run waits (queued, building); `still_wanted` is asked
    between looks, so a stopped run stops waiting."""
    deadline = time.monotonic() + get_settings().build_timeout_seconds + STALE_AFTER_SECONDS
    told = ""
    while True:
        with session_scope() as db:
            row = builds.ensure_build_for(db, packages_hash, packages)
            status = row.status
            path = builds.layer_path(row)
            if path is not None:
                builds.mark_used(db, packages_hash)
                return LayerOutcome(path=path, layer=row.layer)
            if status == "failed":
                return LayerOutcome(failure=builds.failure_message(row))
        if status != told:
            on_wait(status)
            told = status
        with session_scope() as db:
            grant = builds.claim_build(db, packages_hash, stale_after=STALE_AFTER_SECONDS)
        if grant is not None:
            on_wait("building")
            told = "building"
            _run_build(packages_hash, grant, backend)
            continue
        if not still_wanted():
            return LayerOutcome(stopped=True)
        if time.monotonic() > deadline:
            return LayerOutcome(failure="The environment's build did not finish in time.")
        time.sleep(WAIT_POLL_SECONDS)


def queued_builds(*, older_than: timedelta) -> list[str]:
    with session_scope() as db:
        return builds.queued_hashes(db, before=utcnow() - older_than)


def build_sandbox_needed(db: Session, packages_hash: str) -> bool:
    """A build sandbox is needed while its build runs and its builder is alive."""
    row = builds.get_build(db, packages_hash)
    if row is None or row.status != "building" or row.heartbeat_at is None:
        return False
    return row.heartbeat_at > utcnow() - timedelta(seconds=STALE_AFTER_SECONDS)


def _remove_tree(path: Path) -> None:
    def allow_and_retry(function: object, failed: str, _: object) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        function(failed)  # type: ignore[operator]

    if path.exists():
        with contextlib.suppress(OSError):
            path.chmod(0o700)
        shutil.rmtree(path, onerror=allow_and_retry)


def collect_layers(
    backend: SandboxBackend | None = None, *, unused_for: timedelta | None = None
) -> int:
    """Delete layers nothing needs: every attempt but the ready one of each build, unless a
    sandbox still mounts it, and the builds no environment's current revision needs and no
    run used for `unused_for` (settings), with their rows. Returns the directories removed."""
    backend = backend or get_backend()
    unused_for = unused_for or timedelta(hours=get_settings().environment_layer_keep_hours)
    mounted = {
        ref.labels.get(LABEL_ENV_LAYER, "") for ref in backend.list_by_label(installation_label())
    }
    root = builds.layers_root()
    removed = 0
    with session_scope() as db:
        for row in builds.collectable_builds(db, unused_for=unused_for):
            if not any(layer.startswith(f"{row.packages_hash}/") for layer in mounted):
                _remove_tree(root / row.packages_hash)
                db.delete(row)
                removed += 1
        # Per packages hash: the layer to keep ("*" keeps every attempt while one builds).
        keep = {
            build.packages_hash: "*" if build.status == "building" else build.layer
            for build in builds.all_builds(db)
        }
    if root.is_dir():
        for hash_dir in [path for path in root.iterdir() if path.is_dir()]:
            kept = keep.get(hash_dir.name)
            for attempt in list(hash_dir.iterdir()):
                layer = f"{hash_dir.name}/{attempt.name}"
                if kept == "*" or layer == kept or layer in mounted:
                    continue
                _remove_tree(attempt)
                removed += 1
            if kept is None and not any(hash_dir.iterdir()):
                hash_dir.rmdir()
    log.info("environment.layers_collected", removed=removed)
    return removed
