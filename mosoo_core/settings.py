"""Every knob is an environment variable `MOSOO_*` (a `.env` file is honoured)."""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MOSOO_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    env: Literal["development", "production"] = "development"
    data_dir: Path = Path("./data")
    database_url: str = ""  # empty: SQLite file under data_dir
    redis_url: str = "redis://127.0.0.1:6379/0"
    object_dir: Path | None = None  # empty: data_dir / "objects"

    s3_bucket: str = ""  # set to store objects in S3 / R2 / MinIO instead of object_dir
    s3_endpoint_url: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""

    # The public origin of the console, used for links, OAuth redirects, cookie flags and the
    # Origin checks of the websocket and sign-in endpoints. Empty: http://localhost:<web_port>.
    public_url: str = ""
    # Comma-separated addresses of reverse proxies in front of the web port whose
    # X-Forwarded-For names the client (per-IP limits count that client, not the proxy).
    trusted_proxies: str = ""
    web_host: str = "0.0.0.0"
    web_port: int = 3000
    # Empty: data_dir / "run" / "control" / "control.sock". Must be named control.sock, in a
    # directory of its own: sandboxes bind-mount that directory (so they survive restarts).
    control_socket: Path | None = None
    control_host: str = "127.0.0.1"
    control_port: int = 8765

    secret_key: str = ""  # empty: a key file created in data_dir on first start
    # The vault's key-encryption key: base64 of 32 random bytes. Empty: read `master_key_file`
    # (default data_dir / "master.key", created with mode 0600 on first use).
    master_key: SecretStr = SecretStr("")
    master_key_file: Path | None = None
    log_level: str = "INFO"
    log_json: bool = True

    session_cookie: str = "mosoo_session"
    session_ttl_days: int = 30

    email_code_ttl_minutes: int = 10
    email_code_max_attempts: int = 5
    email_sends_per_address_per_hour: int = 5
    email_sends_per_ip_per_hour: int = 20
    # Failed code verifications, on top of the per-code tries: an hour's window per address
    # and per client IP (the answer is the same whether or not the address has an account).
    email_verify_failures_per_address_per_hour: int = 10
    email_verify_failures_per_ip_per_hour: int = 50
    login_ticket_ttl_seconds: int = 60

    smtp_host: str = ""
    smtp_port: int = 587
    smtp_username: str = ""
    smtp_password: str = ""
    smtp_from: str = "Mosoo <no-reply@localhost>"
    smtp_starttls: bool = True
    smtp_ssl: bool = False
    smtp_timeout_seconds: float = 20.0

    google_client_id: str = ""
    google_client_secret: str = ""
    # Overridable so tests can point at a local OpenID Connect provider.
    google_issuer: str = "https://accounts.google.com"

    # Sandboxes: `auto` is docker when an engine answers, else process (bubblewrap).
    sandbox_backend: Literal["auto", "docker", "process"] = "auto"
    sandbox_image: str = ""  # empty: built from driver/Dockerfile, tagged by its content
    sandbox_base_image: str = Field(
        default=""
    )  # empty: python:3.11-slim if local, else debootstrap
    sandbox_memory_mb: int = 1024
    sandbox_cpus: float = 1.0
    sandbox_pids_limit: int = 256
    driver_heartbeat_interval_ms: int = 10_000
    # Which Docker host this process's sandboxes are on: a warm pool belongs to one host
    # (mosoo_core/runtime/pool.py). The machine's name unless the operator names it.
    sandbox_host: str = Field(default_factory=socket.gethostname, max_length=128)
    # The warm pool of Task sandboxes: how many stand by for each kind of sandbox runs used in
    # the last `pool_key_idle_minutes` (0: no pool, every run starts cold), per-kind sizes
    # as JSON keyed "<runtime>" or "<runtime>/<network policy>" (the more specific wins),
    # the memory every member may use at most together (counted at the sandbox memory limit),
    # and how old a member may get before it is replaced.
    pool_size: int = Field(default=1, ge=0, le=64)
    pool_sizes: dict[str, int] = Field(default_factory=dict)
    pool_max_memory_mb: int = Field(default=4096, ge=0)
    pool_member_ttl_minutes: float = Field(default=60.0, gt=0)
    pool_key_idle_minutes: float = Field(default=30.0, gt=0)

    # Environments: where packages are installed from (private mirrors welcome). A
    # revision's packages are built from these; changing them makes new builds.
    pip_index_url: str = "https://pypi.org/simple"
    npm_registry: str = "https://registry.npmjs.org"
    # Test-only: lets a `limited` allowlist name 127.0.0.1:<port> (or localhost:<port>) and
    # lets DNS answers on loopback through. Refused outside development (see the validator).
    egress_allow_loopback: bool = False
    # MCP servers: control and web connect only to public addresses unless this is on (for an
    # operator whose servers live on their own network: private, loopback and CGNAT addresses
    # then pass; the metadata service and link-local never do). See mosoo_core/network/outbound.
    mcp_allow_private_networks: bool = False
    # Model providers likewise (the gateway, a key's Test connection): Ollama on this machine
    # or vLLM on the operator's network need it on; off, a tenant's base URL cannot reach them.
    provider_allow_private_networks: bool = False
    # How long an environment's setup script may run in a new sandbox.
    setup_timeout_seconds: float = 600.0
    # How long installing a revision's packages may take, and how long a layer no current
    # revision needs is kept after its last run (then the beat collects it).
    build_timeout_seconds: float = 900.0
    environment_layer_keep_hours: float = 168.0
    # How long an extracted skill version (data/skills/<version id>) no sandbox mounts is kept
    # after a run last used it (then the beat collects it; a later run extracts it again).
    skill_cache_keep_hours: float = 168.0
    # An Assistant's sandbox left this long without a run is hibernated by the beat (its
    # /workspace saved, the container removed); the next message wakes it.
    pet_idle_minutes: float = Field(default=5.0, gt=0)
    # The owner's terminal into a running Assistant's sandbox (Preview's Sandbox panel, the
    # websocket /api/terminal/{agent_id}); off, the route refuses and the console hides it.
    terminal_enabled: bool = True
    # How often each web process checks the sessions of its open console tabs against the
    # database: an expired or deleted session's tabs leave for /login within this long (a
    # sign-out is pushed at once; mosoo_web/state/signed_out_tabs.py).
    tab_sweep_seconds: float = Field(default=30.0, ge=1, le=3600)

    # Public API v1: requests a minute per access token, and how often an idle event
    # stream sends a keep-alive comment (proxies close connections that stay silent).
    api_rate_limit_per_minute: int = 120
    api_sse_keepalive_seconds: float = 15.0
    # Threads of a web process for the API's token checks and hottest reads (empty: 2 on
    # SQLite, whose reads are CPU and hold the GIL, where more threads only take turns with
    # it; 16 on PostgreSQL, whose reads mostly wait on the network).
    api_threads: int | None = Field(default=None, ge=1, le=64)

    # Usage: raw per-call records are kept this many days (at least 7, and never before their
    # day is rolled up), the daily rollups this many (the Usage page reaches back 90).
    usage_raw_retention_days: int = Field(default=7, ge=7)
    usage_rollup_retention_days: int = Field(default=180, ge=7)

    @model_validator(mode="after")
    def _loopback_egress_only_in_development(self) -> Settings:
        if self.egress_allow_loopback and self.env != "development":
            raise ValueError(
                "MOSOO_EGRESS_ALLOW_LOOPBACK is for tests: it is refused with MOSOO_ENV=production"
            )
        return self

    @model_validator(mode="after")
    def _pool_sizes_by_kind(self) -> Settings:
        for kind, size in self.pool_sizes.items():
            runtime, _, network = kind.partition("/")
            if not runtime.isalpha() or network not in ("", "none", "limited", "full"):
                raise ValueError(
                    f"MOSOO_POOL_SIZES: {kind!r} is not <runtime> or <runtime>/<none|limited|full>"
                )
            if not 0 <= size <= 64:
                raise ValueError(f"MOSOO_POOL_SIZES: {kind!r} must be 0 to 64, not {size}")
        return self

    @model_validator(mode="after")
    def _default_public_url(self) -> Settings:
        # Follows the port, so `MOSOO_WEB_PORT=4000` alone still passes the Origin checks.
        if not self.public_url:
            self.public_url = f"http://localhost:{self.web_port}"
        return self

    @property
    def is_development(self) -> bool:
        return self.env == "development"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'mosoo.db').resolve()}"

    @property
    def resolved_api_threads(self) -> int:
        if self.api_threads is not None:
            return self.api_threads
        return 2 if self.resolved_database_url.startswith("sqlite") else 16

    @property
    def resolved_object_dir(self) -> Path:
        return (self.object_dir or self.data_dir / "objects").resolve()

    @property
    def resolved_control_socket(self) -> Path:
        return (self.control_socket or self.data_dir / "run" / "control" / "control.sock").resolve()

    @property
    def resolved_master_key_file(self) -> Path:
        return (self.master_key_file or self.data_dir / "master.key").resolve()

    @property
    def trusted_proxy_addresses(self) -> frozenset[str]:
        return frozenset(
            str(ipaddress.ip_address(part.strip()))
            for part in self.trusted_proxies.split(",")
            if part.strip()
        )

    @property
    def smtp_enabled(self) -> bool:
        return bool(self.smtp_host)

    @property
    def google_enabled(self) -> bool:
        return bool(self.google_client_id and self.google_client_secret)

    @property
    def cookies_secure(self) -> bool:
        return self.public_url.startswith("https://")

    def resolved_secret_key(self) -> str:
        """The server secret: from the environment, else a 0600 key file made on first use."""
        if self.secret_key:
            return self.secret_key
        path = self.data_dir.resolve() / "secret.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(48))
        return path.read_text().strip()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings_cache() -> None:
    """Forget cached settings (tests change the environment between cases)."""
    get_settings.cache_clear()
