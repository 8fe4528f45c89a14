"""An environment's setup script, run in a new sandbox before its driver starts.

It runs as the sandbox user with every variable of the revision, the *setup only* ones
included (the agent's processes never get those: they are not in the driver's spec), under
a time limit. Its output is kept for the run's diagnostics with every secret value masked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from driver.protocol import EGRESS_GRANT_ENV
from mosoo_core.runtime.sandbox import SandboxBackend, SandboxRef
from mosoo_core.settings import get_settings

LOG_TAIL_CHARS = 64 * 1024  # kept with the run
ERROR_TAIL_CHARS = 1500  # quoted in the run's error message (its column holds 2,000)
MASK = "••••"
_TUNNEL = (
    'import sys; sys.path.insert(0, "/opt/mosoo"); from driver.egress import main; '
    "sys.exit(main(sys.argv[1:]))"
)


@dataclass(frozen=True)
class SetupResult:
    ok: bool
    log: str  # secrets masked, at most LOG_TAIL_CHARS (the end)
    message: str  # why it failed, with the log's tail; "" when ok


def redact(text: str, secrets: Iterable[str]) -> str:
    """Every secret value masked; longer values first, so one that contains another is
    masked whole."""
    for value in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def run_setup(
    backend: SandboxBackend,
    ref: SandboxRef,
    script: str,
    env: dict[str, str],
    secrets: Iterable[str],
    *,
    egress_grant: str = "",
) -> SetupResult:
    """With `egress_grant` (a `limited` run's), the script reaches the run's allowed hosts
    through the same tunnel and proxy as the agent will: it runs before the driver, so
    `driver.egress` opens the tunnel for it (the grant in its environment, not its argv)."""
    timeout = get_settings().setup_timeout_seconds
    # The script goes in on stdin, so it is in no process's argv and no file of the sandbox;
    # its two streams are one, so the log keeps their order.
    argv = ["sh", "-c", "exec bash -s 2>&1"]
    if egress_grant:
        # Isolated (-I): the script's PYTHONPATH may name the owner's packages, which must not
        # replace the driver's own dependencies in the tunnel's process.
        argv = ["sh", "-c", f"exec python3 -I -c '{_TUNNEL}' bash -s 2>&1"]
        env = {**env, EGRESS_GRANT_ENV: egress_grant}
    result = backend.exec(ref, argv, env=env, stdin=script.encode(), timeout=timeout)
    output = result.stdout_text
    log = redact(output, secrets)[-LOG_TAIL_CHARS:]
    if result.timed_out:
        reason = f"The setup script did not finish within {timeout:g} seconds."
    elif result.exit_code != 0:
        reason = f"The setup script exited with status {result.exit_code}."
    else:
        return SetupResult(ok=True, log=log, message="")
    tail = log[-ERROR_TAIL_CHARS:].strip()
    return SetupResult(ok=False, log=log, message=f"{reason}\n{tail}" if tail else reason)
