"""The `mosoo` command: run the processes, migrate, check the machine."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import typer

from mosoo_core.settings import get_settings

ROOT = Path(__file__).resolve().parent.parent
app = typer.Typer(help="Mosoo: a self-hostable agent runtime.", no_args_is_help=True, add_completion=False)


def _exec(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Replace this process, so signals reach the real server directly."""
    os.execvpe(argv[0], argv, {**os.environ, **(env or {})})


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema (one Alembic chain)."""
    from mosoo_core.migrations import upgrade

    upgrade()
    typer.echo("database is at the latest revision")


@app.command()
def web(port: int = typer.Option(None, help="Port for the console and the API (default MOSOO_WEB_PORT).")) -> None:
    """The console and the HTTP API in one Reflex process (production build)."""
    settings = get_settings()
    port = port or settings.web_port
    os.chdir(ROOT)
    _exec(
        [
            sys.executable, "-m", "reflex", "run", "--env", "prod", "--single-port",
            "--frontend-port", str(port), "--backend-port", str(port),
            "--backend-host", settings.web_host, "--loglevel", "warning",
        ],
        env={"REFLEX_USE_SYSTEM_BUN": "1", "REFLEX_TELEMETRY_ENABLED": "false"},
    )


@app.command()
def control() -> None:
    """The control service: driver sockets (Unix and TCP)."""
    from mosoo_core.control.server import serve

    serve()


@app.command()
def worker(concurrency: int = typer.Option(2, help="Parallel tasks.")) -> None:
    """The Celery worker: email delivery, run dispatch and sandbox work."""
    _exec(
        [
            sys.executable, "-m", "celery", "-A", "mosoo_core.tasks", "worker",
            "--loglevel", get_settings().log_level, "--concurrency", str(concurrency),
            "--without-gossip", "--without-mingle", "-n", f"mosoo@{os.uname().nodename}",
        ]
    )


@app.command()
def beat() -> None:
    """The Celery beat scheduler: sweeps and purges on a timer."""
    (get_settings().data_dir / "run").mkdir(parents=True, exist_ok=True)
    _exec([sys.executable, "-m", "celery", "-A", "mosoo_core.tasks", "beat", "--loglevel", get_settings().log_level])


@app.command()
def up() -> None:
    """Migrate, then run web, control, worker and beat together; Ctrl-C stops them all."""
    from mosoo_core.supervisor import run_all

    raise typer.Exit(run_all())


@app.command()
def doctor() -> None:
    """Check what Mosoo needs on this machine and say how to fix what is missing."""
    from mosoo_core.doctor import run_checks

    problems = run_checks(echo=typer.echo)
    raise typer.Exit(1 if problems else 0)


vault_app = typer.Typer(help="The vault: master key status and rotation.", no_args_is_help=True)
app.add_typer(vault_app, name="vault")


@vault_app.command("status")
def vault_status() -> None:
    """Show the configured master key id and how many secrets each master key wraps."""
    from mosoo_core import vault
    from mosoo_core.db import session_scope

    try:
        current = vault.load_master_key(create=False)
    except vault.VaultError as error:
        typer.echo(f"vault status: {error.message}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"configured master key: {current.key_id}")
    with session_scope() as db:
        counts = vault.count_secrets_by_key(db)
    for key_id, count in sorted(counts.items()):
        marker = "" if key_id == current.key_id else "  (not the configured key)"
        typer.echo(f"  {key_id}: {count} secret(s){marker}")
    raise typer.Exit(0 if set(counts) <= {current.key_id} else 1)


@vault_app.command("rotate")
def vault_rotate(
    new_key_file: Path | None = typer.Option(
        None,
        help="The new master key (base64 of 32 bytes); created with mode 0600 if missing."
        " Default: a new data_dir/master-<time>.key.",
    ),
    old_key_file: Path | None = typer.Option(
        None, help="The current master key. Default: MOSOO_MASTER_KEY or the configured key file."
    ),
) -> None:
    """Re-wrap every data key under a new master key, in one transaction.

    Every secret is verified to decrypt under the new key before anything is committed.
    Afterwards switch MOSOO_MASTER_KEY (or MOSOO_MASTER_KEY_FILE) to the new key and restart.
    Running it again with the same keys is safe and picks up secrets sealed in between.
    """
    from mosoo_core import vault
    from mosoo_core.db import session_scope

    settings = get_settings()
    try:
        old_key = vault.read_key_file(old_key_file) if old_key_file else vault.load_master_key(create=False)
        if new_key_file is None:
            stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
            new_key_file = settings.data_dir.resolve() / f"master-{stamp}.key"
        if new_key_file.exists():
            new_key = vault.read_key_file(new_key_file)
        else:
            new_key = vault.create_key_file(new_key_file)
            typer.echo(f"new master key written to {new_key_file} (mode 0600)")
        with session_scope() as db:
            result = vault.rotate_master_key(db, old_key=old_key, new_key=new_key)
    except vault.VaultError as error:
        typer.echo(f"vault rotate: {error.message}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"re-wrapped {result.rewrapped} data key(s) from {result.old_key_id} to {result.new_key_id}"
        f" ({result.already_current} already under the new key)"
    )
    typer.echo(
        f"next: set MOSOO_MASTER_KEY_FILE={new_key_file} (or MOSOO_MASTER_KEY to its contents),"
        " restart every Mosoo process, then keep the old key until `mosoo vault status` is clean"
    )


sandbox_app = typer.Typer(help="Sandboxes: the image, what exists, manual cleanup.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {pair!r}", param_hint="--label")
        labels[key] = value
    return labels


@sandbox_app.command("build-image")
def sandbox_build_image(force: bool = typer.Option(False, help="Rebuild even when the tag exists.")) -> None:
    """Build the sandbox image from driver/Dockerfile, offline; a no-op when it is up to date."""
    from mosoo_core.runtime.sandbox import SandboxError
    from mosoo_core.runtime.sandbox.image import ensure_sandbox_image

    try:
        tag = ensure_sandbox_image(base_image=get_settings().sandbox_base_image, force=force, echo=typer.echo)
    except SandboxError as error:
        typer.echo(f"sandbox build-image: {error.message}", err=True)
        raise typer.Exit(1) from None
    typer.echo(tag)


@sandbox_app.command("list")
def sandbox_list(label: list[str] = typer.Option([], help="Only sandboxes with this label (key=value, repeatable).")) -> None:
    """The sandboxes of the configured backend, with their labels."""
    from mosoo_core.runtime.sandbox import (
        LABEL_APP,
        LABEL_DRIVER_INSTANCE,
        LABEL_SUBJECT,
        get_backend,
    )

    backend = get_backend()
    for ref in backend.list_by_label(_labels(label)):
        typer.echo(
            f"{backend.name}  {ref.name}  {ref.state:<8}  {ref.labels.get(LABEL_SUBJECT, '')}"
            f"  app={ref.labels.get(LABEL_APP, '')}  driver={ref.labels.get(LABEL_DRIVER_INSTANCE, '')}"
        )


@sandbox_app.command("gc")
def sandbox_gc(
    label: list[str] = typer.Option([], help="Remove sandboxes with this label (key=value, repeatable; at least one)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be removed."),
) -> None:
    """Remove sandboxes matching every --label, and workspace volumes left without a container."""
    from mosoo_core.runtime.sandbox import get_backend
    from mosoo_core.runtime.sandbox.docker_backend import DockerBackend

    labels = _labels(label)
    if not labels:
        raise typer.BadParameter("name at least one --label, e.g. --label mosoo.test=1", param_hint="--label")
    backend = get_backend()
    for ref in backend.list_by_label(labels):
        typer.echo(f"{'would remove' if dry_run else 'removing'} {backend.name} sandbox {ref.name}")
        if not dry_run:
            backend.remove(ref)
    if isinstance(backend, DockerBackend):
        for volume in backend.prune_orphan_volumes(dry_run=dry_run):
            typer.echo(f"{'would remove' if dry_run else 'removed'} orphaned workspace volume {volume}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
