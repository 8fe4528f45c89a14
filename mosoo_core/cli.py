"""The `mosoo` command: run the processes, migrate, check the machine."""

from __future__ import annotations

import os
import sys
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
