"""How long `mosoo web` takes to serve its sign-in page: a start that builds the frontend
against a restart that reuses the build (mosoo_web/serve.py), turn about in one run.

Each round starts `mosoo web` twice on one port and folder: first with the folder's build
stamp removed (the start builds, as every start did before), then again (it reuses the
build). The time is from the command to the first 200 of `/login`; SQLite and a data dir in
a temp folder, the first start of the run (installing the frontend's packages) left out.

    .venv/bin/python bench/web_start.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosoo_web.serve import REUSING, STAMP  # noqa: E402
from tests.support.processes import (  # noqa: E402
    free_port,
    mosoo_env,
    page_served,
    running,
    wait_for,
)


def _start(env: dict[str, str], url: str, log: Path) -> float:
    started = time.monotonic()
    with running(["web"], env, log) as process:
        wait_for(lambda: page_served(f"{url}/login"), 600, "the console to be served", process)
        elapsed = time.monotonic() - started
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mosoo-bench-web-") as name:
        temp = Path(name)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        web_dir = temp / "reflex-web"
        env = mosoo_env(
            temp / "data",
            f"sqlite:///{temp / 'mosoo.db'}",
            MOSOO_WEB_PORT=str(port),
            MOSOO_PUBLIC_URL=url,
            REFLEX_WEB_WORKDIR=str(web_dir),
        )
        print(f"load before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        _start(env, url, temp / "warm-up.log")
        built: list[float] = []
        reused: list[float] = []
        for round_ in range(1, args.rounds + 1):
            (web_dir / STAMP).unlink(missing_ok=True)
            build_log, reuse_log = temp / f"build-{round_}.log", temp / f"reuse-{round_}.log"
            built.append(_start(env, url, build_log))
            reused.append(_start(env, url, reuse_log))
            if REUSING in build_log.read_text() or REUSING not in reuse_log.read_text():
                raise SystemExit(f"round {round_}: the starts did not build, then reuse")
            print(f"round {round_}: builds {built[-1]:.2f} s, reuses {reused[-1]:.2f} s")
        b, r = statistics.median(built), statistics.median(reused)
        print(
            f"median of {args.rounds}: a start that builds {b:.2f} s, a restart that reuses "
            f"{r:.2f} s ({r / b:.2f}x, {b - r:.1f} s less); load {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
