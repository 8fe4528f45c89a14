"""Install an environment's packages into its layer: `python -m driver.build`, run by the
worker in a build sandbox (the BuildJob as JSON on stdin, the egress grant in
MOSOO_EGRESS_GRANT).

The build sandbox has no network; pip and npm reach the package indexes through the same
tunnel a `limited` run uses, and control's proxy lets this grant reach the configured index
hosts and nothing else. Python packages go to `<target>/python` (`pip install --target`,
console scripts in its `bin/`), npm packages to `<target>/node/node_modules`. Every line
both tools print goes to the log file in the layer, which the worker shows while it grows.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from driver.egress import DEFAULT_EGRESS_SOCKET, run_with_egress
from driver.protocol import EGRESS_GRANT_ENV, EGRESS_SOCKET_ENV, BuildJob

# Variables of the sandbox the tools must not see: their own configuration comes from the
# job alone, so nothing in the image or the worker's environment changes what is installed.
_DROPPED_PREFIXES = ("PIP_", "npm_config_", "NPM_CONFIG_", "MOSOO_")


def commands(job: BuildJob) -> list[list[str]]:
    target = Path(job.target)
    steps: list[list[str]] = []
    if job.pip:
        steps.append(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
                "--prefer-binary",
                "--target",
                str(target / "python"),
                "--index-url",
                job.pip_index_url,
                *job.pip,
            ]
        )
    if job.npm:
        steps.append(
            [
                "npm",
                "install",
                "--prefix",
                str(target / "node"),
                "--registry",
                job.npm_registry,
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--save-exact",
                "--loglevel",
                "http",
                *job.npm,
            ]
        )
    return steps


def tool_environment(environ: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update(
        {
            "PYTHONNOUSERSITE": "1",
            # npm's cache and its (empty) user configuration live in the sandbox's /tmp.
            "npm_config_cache": "/tmp/mosoo-npm-cache",
            "npm_config_userconfig": "/tmp/mosoo-npmrc",
            "npm_config_update_notifier": "false",
        }
    )
    return env


def shown(argv: Sequence[str]) -> str:
    """A step as the log shows it: `pip install ...` rather than the interpreter's path."""
    if argv[:3] == [sys.executable, "-m", "pip"]:
        return shlex.join(["pip", *argv[3:]])
    return shlex.join(argv)


async def build(job: BuildJob, grant: str, socket_path: str) -> int:
    target = Path(job.target)
    if job.npm:
        (target / "node").mkdir(parents=True, exist_ok=True)
    with open(target / job.log_name, "a", buffering=1, encoding="utf-8") as log:
        status = await run_with_egress(
            commands(job),
            socket_path=socket_path,
            grant=grant,
            env=tool_environment(dict(os.environ)),
            stdout=log,
            before_each=lambda argv: log.write(f"$ {shown(argv)}\n"),
        )
        outcome = "finished" if status == 0 else f"failed (exit status {status})"
        log.write(f"\nBuild {outcome}.\n")
    return status


def main() -> int:
    grant = os.environ.get(EGRESS_GRANT_ENV, "")
    if not grant:
        print(f"{EGRESS_GRANT_ENV} is not set", file=sys.stderr)
        return 2
    job = BuildJob.model_validate_json(sys.stdin.read())
    socket_path = os.environ.get(EGRESS_SOCKET_ENV, DEFAULT_EGRESS_SOCKET)
    return asyncio.run(build(job, grant, socket_path))


if __name__ == "__main__":
    raise SystemExit(main())
