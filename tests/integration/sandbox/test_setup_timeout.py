"""The setup script's time limit (`MOSOO_SETUP_TIMEOUT_SECONDS`), on both backends: a script
that outlives it is stopped (with what it started), and the run's failure says so with the
log it printed, masked."""

from __future__ import annotations

import time

import pytest

from mosoo_core.runtime.sandbox import SandboxBackend, SandboxRef
from mosoo_core.runtime.setup import run_setup
from mosoo_core.settings import reset_settings_cache

SECRET = "setup-timeout-secret-value"


def test_a_setup_script_past_its_time_limit_is_stopped_and_fails_with_its_log(
    backend: SandboxBackend, sandbox: SandboxRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOSOO_SETUP_TIMEOUT_SECONDS", "1.5")
    reset_settings_cache()
    script = (
        'echo "fetching with $TOKEN"\n'
        "(sleep 3; touch /workspace/too-late) &\n"
        "sleep 60\n"
        "echo never\n"
    )
    started = time.monotonic()
    result = run_setup(backend, sandbox, script, {"TOKEN": SECRET}, [SECRET])
    took = time.monotonic() - started

    assert not result.ok
    assert result.message.startswith("The setup script did not finish within 1.5 seconds.")
    assert "fetching with ••••" in result.message and "fetching with ••••" in result.log
    assert SECRET not in result.message + result.log and "never" not in result.log
    assert took < 15
    time.sleep(3)  # past the moment the script's background child would have written
    assert backend.exec(sandbox, ["test", "-e", "/workspace/too-late"]).exit_code != 0
