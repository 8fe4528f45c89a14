"""Embedded defaults and environment overrides."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mosoo_core.settings import Settings


def test_embedded_defaults_live_under_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.delenv("MOSOO_REDIS_URL", raising=False)  # a test pass may point it elsewhere
    settings = Settings()
    assert settings.resolved_database_url == f"sqlite:///{(tmp_path / 'd' / 'mosoo.db').resolve()}"
    assert settings.resolved_object_dir == (tmp_path / "d" / "objects").resolve()
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.is_development and not settings.smtp_enabled and not settings.google_enabled


def test_every_knob_is_a_mosoo_variable_and_dotenv_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("MOSOO_WEB_PORT=4000\nMOSOO_SMTP_HOST=mail.example\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MOSOO_DATABASE_URL", "postgresql+psycopg://u:p@db/x")
    settings = Settings()
    assert settings.web_port == 4000 and settings.smtp_enabled
    assert settings.resolved_database_url == "postgresql+psycopg://u:p@db/x"


@pytest.mark.parametrize(
    ("database_url", "threads", "resolved"),
    [
        ("", None, 2),  # SQLite: reads hold the GIL, more threads only take turns with it
        ("postgresql+psycopg://u:p@db/x", None, 16),  # PostgreSQL: reads wait on the network
        ("", "8", 8),
    ],
)
def test_the_apis_threads_follow_the_database_unless_set(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    threads: str | None,
    resolved: int,
) -> None:
    monkeypatch.setenv("MOSOO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MOSOO_DATABASE_URL", database_url)
    if threads is None:
        monkeypatch.delenv("MOSOO_API_THREADS", raising=False)
    else:
        monkeypatch.setenv("MOSOO_API_THREADS", threads)
    assert Settings().resolved_api_threads == resolved


def test_the_apis_threads_are_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_API_THREADS", "0")
    with pytest.raises(ValueError, match=r"MOSOO_API_THREADS|api_threads"):
        Settings()


@pytest.mark.parametrize("value", ["0", "0.5", "3601"])
def test_the_tab_sweep_stays_between_a_second_and_an_hour(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("MOSOO_TAB_SWEEP_SECONDS", value)
    with pytest.raises(ValueError, match=r"tab_sweep_seconds"):
        Settings()
    monkeypatch.setenv("MOSOO_TAB_SWEEP_SECONDS", "15")
    assert Settings().tab_sweep_seconds == 15


def test_secret_key_file_is_created_once_with_mode_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MOSOO_SECRET_KEY", raising=False)
    monkeypatch.setenv("MOSOO_DATA_DIR", str(tmp_path / "d"))
    first = Settings().resolved_secret_key()
    assert Settings().resolved_secret_key() == first and len(first) >= 40
    mode = stat.S_IMODE(os.stat(tmp_path / "d" / "secret.key").st_mode)
    assert mode == 0o600


def test_the_public_url_follows_the_web_port_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_WEB_PORT", "4000")
    assert Settings().public_url == "http://localhost:4000"
    monkeypatch.setenv("MOSOO_PUBLIC_URL", "https://mosoo.example.com")
    assert Settings().public_url == "https://mosoo.example.com"


def test_loopback_egress_is_refused_in_production(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOSOO_EGRESS_ALLOW_LOOPBACK", "1")
    assert Settings().egress_allow_loopback  # development: the test-only switch works
    monkeypatch.setenv("MOSOO_ENV", "production")
    with pytest.raises(ValueError, match="MOSOO_EGRESS_ALLOW_LOOPBACK is for tests"):
        Settings()


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        (
            {"MOSOO_ENV": "production", "MOSOO_EGRESS_ALLOW_LOOPBACK": "1"},
            "MOSOO_EGRESS_ALLOW_LOOPBACK is for tests: it is refused with MOSOO_ENV=production",
        ),
        (
            {"MOSOO_USAGE_RAW_RETENTION_DAYS": "3"},
            "MOSOO_USAGE_RAW_RETENTION_DAYS: Input should be greater than or equal to 7",
        ),
    ],
)
def test_every_mosoo_command_refuses_bad_settings_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], said: str
) -> None:
    """Through the real `mosoo` command, as an operator starts it: exit 2 and the reason, no
    traceback, and nothing started (the data directory is not even made)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MOSOO_")}
    data = tmp_path / "data"
    environment |= {"MOSOO_DATA_DIR": str(data), **variables}
    for command in ("control", "worker", "migrate"):
        done = subprocess.run(
            [sys.executable, "-m", "mosoo_core.cli", command],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"mosoo: invalid settings: {said}" in done.stderr
        assert "Traceback" not in done.stderr + done.stdout
    assert not (data / "mosoo.db").exists()
