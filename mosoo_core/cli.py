"""The `mosoo` command: run the processes, migrate, check the machine.

Each command imports what it needs inside its function: `mosoo --help` and the API client
commands then start without loading the database, Docker, Reflex or Celery (the one reason
for the function-level imports below).
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from pydantic import ValidationError

from mosoo_core.settings import get_settings

if TYPE_CHECKING:
    from mosoo_core import api_client

ROOT = Path(__file__).resolve().parent.parent
app = typer.Typer(
    help="Mosoo: a self-hostable agent runtime.", no_args_is_help=True, add_completion=False
)


@app.callback()
def _settings_first() -> None:
    # Every command reads the settings before it does anything: a refused value (a test-only
    # switch in production, a retention below its minimum) stops it with the reason, exit 2,
    # instead of a traceback from whichever process first asked.
    try:
        get_settings()
    except ValidationError as error:
        for problem in error.errors():
            field = "_".join(str(part) for part in problem["loc"])
            where = f"MOSOO_{field.upper()}: " if field else ""
            reason = str(problem["msg"]).removeprefix("Value error, ")
            typer.echo(f"mosoo: invalid settings: {where}{reason}", err=True)
        raise typer.Exit(2) from None


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
def web(
    port: int = typer.Option(
        None, help="Port for the console and the API (default MOSOO_WEB_PORT)."
    ),
) -> None:
    """The console and the HTTP API in one Reflex process (production build)."""
    settings = get_settings()
    port = port or settings.web_port
    os.chdir(ROOT)
    _exec(
        [
            sys.executable,
            "-m",
            # Reflex's CLI, building the frontend only when its input changed (mosoo_web/serve.py).
            "mosoo_web.serve",
            "run",
            "--env",
            "prod",
            "--single-port",
            "--frontend-port",
            str(port),
            "--backend-port",
            str(port),
            "--backend-host",
            settings.web_host,
            "--loglevel",
            "warning",
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
            sys.executable,
            "-m",
            "celery",
            "-A",
            "mosoo_core.tasks",
            "worker",
            "--loglevel",
            get_settings().log_level,
            "--concurrency",
            str(concurrency),
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"mosoo@{os.uname().nodename}",
        ]
    )


@app.command()
def beat() -> None:
    """The Celery beat scheduler: sweeps and purges on a timer."""
    (get_settings().data_dir / "run").mkdir(parents=True, exist_ok=True)
    _exec(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "mosoo_core.tasks",
            "beat",
            "--loglevel",
            get_settings().log_level,
        ]
    )


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
        old_key = (
            vault.read_key_file(old_key_file)
            if old_key_file
            else vault.load_master_key(create=False)
        )
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


sandbox_app = typer.Typer(
    help="Sandboxes: the image, what exists, manual cleanup.", no_args_is_help=True
)
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
def sandbox_build_image(
    force: bool = typer.Option(False, help="Rebuild even when the tag exists."),
) -> None:
    """Build the sandbox image from driver/Dockerfile, offline; a no-op when it is up to date."""
    from mosoo_core.runtime.sandbox import SandboxError
    from mosoo_core.runtime.sandbox.image import ensure_sandbox_image

    try:
        tag = ensure_sandbox_image(
            base_image=get_settings().sandbox_base_image, force=force, echo=typer.echo
        )
    except SandboxError as error:
        typer.echo(f"sandbox build-image: {error.message}", err=True)
        raise typer.Exit(1) from None
    typer.echo(tag)


@sandbox_app.command("list")
def sandbox_list(
    label: list[str] = typer.Option(
        [], help="Only sandboxes with this label (key=value, repeatable)."
    ),
) -> None:
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
    label: list[str] = typer.Option(
        [], help="Remove sandboxes with this label (key=value, repeatable; at least one)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be removed."),
) -> None:
    """Remove sandboxes matching every --label, and workspace volumes left without a container."""
    from mosoo_core.runtime.sandbox import get_backend
    from mosoo_core.runtime.sandbox.docker_backend import DockerBackend

    labels = _labels(label)
    if not labels:
        raise typer.BadParameter(
            "name at least one --label, e.g. --label mosoo.test=1", param_hint="--label"
        )
    backend = get_backend()
    for ref in backend.list_by_label(labels):
        typer.echo(f"{'would remove' if dry_run else 'removing'} {backend.name} sandbox {ref.name}")
        if not dry_run:
            backend.remove(ref)
    if isinstance(backend, DockerBackend):
        for volume in backend.prune_orphan_volumes(dry_run=dry_run):
            typer.echo(
                f"{'would remove' if dry_run else 'removed'} orphaned workspace volume {volume}"
            )


usage_app = typer.Typer(
    help="Usage: the daily rollup of the model-call ledger.", no_args_is_help=True
)
app.add_typer(usage_app, name="usage")


@usage_app.command("rebuild")
def usage_rebuild(
    start: datetime | None = typer.Option(
        None,
        "--from",
        formats=["%Y-%m-%d"],
        help="First UTC day to recompute. Default: the oldest raw record's day.",
    ),
    end: datetime | None = typer.Option(
        None, "--to", formats=["%Y-%m-%d"], help="Last UTC day to recompute. Default: today."
    ),
) -> None:
    """Recompute the daily usage rollup from the raw records, day by day, in one transaction.

    Each day is replaced whole, so running it again gives the same rollup. Days whose raw
    records were already pruned (past MOSOO_USAGE_RAW_RETENTION_DAYS) keep their rollup.
    """
    from mosoo_core import usage
    from mosoo_core.clock import utcnow
    from mosoo_core.db import session_scope
    from mosoo_core.errors import InvalidInput

    try:
        with session_scope() as db:
            result = usage.rebuild(
                db,
                start=start.date() if start else None,
                end=end.date() if end else None,
                now=utcnow(),
            )
    except InvalidInput as error:
        typer.echo(f"usage rebuild: {error.message}", err=True)
        raise typer.Exit(1) from None
    if result.days:
        typer.echo(
            f"rebuilt {len(result.days)} day(s) from {result.days[0]} to {result.days[-1]}:"
            f" {result.rows} rollup row(s)"
        )
    else:
        typer.echo("no day to rebuild")
    if result.skipped:
        typer.echo(
            f"kept {len(result.skipped)} day(s) whose raw records are pruned:"
            f" {', '.join(str(day) for day in result.skipped)}"
        )


# --- The client side: sign in to a Mosoo server and use its public API --------------------


def _server_url(explicit: str | None = None) -> str:
    """--url, else $MOSOO_URL, else the server of the saved sign-in, else this install's public URL."""
    from mosoo_core import api_client

    if explicit:
        return explicit
    if os.environ.get("MOSOO_URL"):
        return os.environ["MOSOO_URL"]
    try:
        saved = api_client.load_credentials()
    except api_client.ApiError:
        saved = None
    return saved.url if saved else get_settings().public_url


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def _api_failure(error: Exception) -> typer.Exit:
    from mosoo_core.api_client import ApiError

    if isinstance(error, ApiError) and error.code == "unauthenticated":
        return _fail("Your access token is not valid any more (revoked?). Run `mosoo login`.")
    return _fail(f"error: {getattr(error, 'message', error)}")


def _signed_in_client() -> api_client.MosooClient:
    """A client with the token of $MOSOO_TOKEN or of the saved sign-in."""
    from mosoo_core import api_client

    token = os.environ.get("MOSOO_TOKEN")
    try:
        if token:
            return api_client.MosooClient(_server_url(), token)
        saved = api_client.load_credentials()
        if saved is None:
            raise _fail("Not signed in. Run `mosoo login` first.")
        return api_client.MosooClient(os.environ.get("MOSOO_URL") or saved.url, saved.token)
    except api_client.ApiError as error:
        raise _api_failure(error) from None


@app.command()
def login(
    url: str = typer.Option(
        None, help="The Mosoo server (default: $MOSOO_URL, the last server, or MOSOO_PUBLIC_URL)."
    ),
) -> None:
    """Sign this CLI in: confirm a one-time code in the console, the CLI gets an access token."""
    import socket

    from mosoo_core import api_client

    def show(started: dict[str, object]) -> None:
        typer.echo("To sign in, open this page in a browser where you are signed in to Mosoo:\n")
        typer.echo(
            f"    {started.get('verification_uri_complete') or started.get('verification_uri')}\n"
        )
        typer.echo(f"and check that it shows this code:  {started.get('user_code')}\n")
        typer.echo("Waiting for approval (Ctrl-C to cancel)...")

    try:
        with api_client.MosooClient(_server_url(url)) as client:
            answer = api_client.device_login(
                client, f"mosoo CLI on {socket.gethostname()}"[:60], on_code=show
            )
            path = api_client.save_credentials(
                api_client.Credentials(url=client.url, token=str(answer["access_token"]))
            )
    except api_client.ApiError as error:
        if error.code == "access_denied":
            raise _fail("Sign-in was denied in the console.") from None
        raise _fail(f"Sign-in failed: {error.message}") from None
    except KeyboardInterrupt:
        raise _fail("Sign-in cancelled.", 130) from None
    typer.echo(
        f"Signed in to {client.url} as {answer.get('account_email', '?')}. Token saved to {path}."
    )


@app.command()
def logout() -> None:
    """Forget the saved token (revoke it on the console's Access tokens page to end it everywhere)."""
    from mosoo_core import api_client

    path = api_client.credentials_path()
    if api_client.delete_credentials():
        typer.echo(
            f"Signed out: removed {path}. Revoke the token on the Access tokens page if it may have leaked."
        )
    else:
        typer.echo("Not signed in.")


agents_cli = typer.Typer(
    help="Agents on the Mosoo server you are signed in to.", no_args_is_help=True
)
app.add_typer(agents_cli, name="agents")
threads_cli = typer.Typer(
    help="Threads on the Mosoo server you are signed in to.", no_args_is_help=True
)
app.add_typer(threads_cli, name="threads")


def _agent_status(agent: dict[str, object]) -> str:
    version = agent.get("published_version")
    if agent.get("status") == "published" and version is not None:
        return f"published v{version}"
    return str(agent.get("status") or "")


@agents_cli.command("list")
def agents_list() -> None:
    """Your agents across your Apps: id, name and whether they take API threads."""
    from mosoo_core.api_client import ApiError

    try:
        with _signed_in_client() as client:
            found = client.list_agents()
    except ApiError as error:
        raise _api_failure(error) from None
    if not found:
        typer.echo("No agents yet. Create one in the console.")
        return
    width = max(len(str(agent.get("name", ""))) for agent in found)
    for agent in found:
        typer.echo(
            f"{agent.get('id', '')}  {agent.get('name', '')!s:<{width}}  {_agent_status(agent)}"
        )


@threads_cli.command("list")
def threads_list(
    agent: str = typer.Option(None, "--agent", help="Only this agent's threads (id or name)."),
) -> None:
    """Recent threads, newest first."""
    from mosoo_core.api_client import ApiError

    try:
        with _signed_in_client() as client:
            all_agents = client.list_agents()
            chosen = [_resolve_agent(all_agents, agent)] if agent else all_agents
            rows = [
                (item, thread) for item in chosen for thread in client.list_threads(str(item["id"]))
            ]
    except ApiError as error:
        raise _api_failure(error) from None
    if not rows:
        typer.echo("No threads yet.")
        return
    rows.sort(key=lambda row: str(row[1].get("updated_at", "")), reverse=True)
    for item, thread in rows:
        title = str(thread.get("title") or "(untitled)")
        typer.echo(
            f"{thread.get('id', '')}  {str(thread.get('updated_at', ''))[:19]}  {thread.get('status', '')!s:<10}"
            f"  {item.get('name', '')}  {title}"
        )


def _resolve_agent(found: list[dict[str, object]], wanted: str) -> dict[str, object]:
    """An agent by exact id, else by name (case-insensitive); ambiguity is an error."""
    for agent in found:
        if agent.get("id") == wanted:
            return agent
    named = [agent for agent in found if str(agent.get("name", "")).casefold() == wanted.casefold()]
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(str(agent.get("id")) for agent in named)
        raise _fail(f"Several agents are named {wanted!r} ({ids}); use the id.")
    raise _fail(f"No agent {wanted!r}. `mosoo agents list` shows yours.")


@app.command()
def run(
    agent: str = typer.Argument(..., help="The agent's id or name."),
    prompt: str = typer.Argument(..., help="The first message."),
) -> None:
    """Start a thread with PROMPT and stream the answer; exits 1 if the run fails."""
    from mosoo_core.api_client import ApiError

    try:
        with _signed_in_client() as client:
            chosen = _resolve_agent(client.list_agents(), agent)
            created = client.create_thread(str(chosen["id"]), prompt)
            run_info = created.get("run") or {}
            thread_id = str(created["thread"]["id"])
            typer.echo(f"thread {thread_id}", err=True)
            raise typer.Exit(_follow_run(client, thread_id, str(run_info.get("id") or "")))
    except ApiError as error:
        raise _api_failure(error) from None
    except KeyboardInterrupt:
        raise _fail(
            "\nStopped following; the run goes on (see the thread in the console).", 130
        ) from None


def _follow_run(client: api_client.MosooClient, thread_id: str, run_id: str) -> int:
    """Print the run's answer as it streams; the exit code says how the run ended."""
    printed_text = False
    for event in client.stream_events(thread_id):
        if run_id and event.get("run_id") not in (None, run_id):
            continue
        kind = event.get("type")
        payload = event.get("payload") or {}
        if kind == "agent.message.delta":
            text = str(payload.get("text", ""))
            sys.stdout.write(text)
            sys.stdout.flush()
            printed_text = printed_text or bool(text)
        elif kind == "tool.use.started":
            typer.echo(f"[tool] {payload.get('name', 'tool')}", err=True)
        elif kind == "tool.use.completed" and payload.get("is_error"):
            typer.echo(f"[tool] {payload.get('name', 'tool')} failed", err=True)
        elif kind == "tool.confirmation.required":
            typer.echo(
                f"[tool] {payload.get('name', 'tool')} waits for your approval in the console",
                err=True,
            )
        elif kind == "run.completed":
            final_text = payload.get("final_text")
            if not printed_text and isinstance(final_text, str):
                sys.stdout.write(final_text)
            sys.stdout.write("\n")
            sys.stdout.flush()
            return 0
        elif kind in ("run.failed", "run.cancelled"):
            if printed_text:
                sys.stdout.write("\n")
                sys.stdout.flush()
            if kind == "run.cancelled":
                typer.echo("run cancelled", err=True)
            else:
                typer.echo(
                    f"run failed: {payload.get('message') or payload.get('code') or 'unknown error'}",
                    err=True,
                )
            return 1
    return 1


def main() -> None:
    app()


if __name__ == "__main__":
    main()
