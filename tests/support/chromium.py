"""Launching the test suite's Chromium: which one, its flags, and the preload that keeps Docker's
interface churn from failing its page loads (tests/support/no_netlink.c says why)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from playwright.sync_api import Browser, BrowserType

# Chromium's old headless shell (Debian's chromium-headless-shell, what Playwright itself runs
# headless): the browser journeys' Chromium used 28% less CPU in it than in the full browser's
# headless mode, and the browser tests took 285 s instead of 349 s (2 workers). Set
# MOSOO_TEST_CHROMIUM=/usr/bin/chromium to run them in the full browser.
CHROMIUM = os.environ.get("MOSOO_TEST_CHROMIUM", "/usr/bin/chromium-headless-shell")

# Without the background-networking flags, Chromium keeps dialling Google's hosts, which this
# machine's closed network refuses (MACHINE.md).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]

NO_NETLINK_SOURCE = Path(__file__).with_name("no_netlink.c")


def build_no_netlink(directory: Path) -> Path:
    """The preload, built from `no_netlink.c` into `directory`."""
    library = directory / "no_netlink.so"
    built = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(NO_NETLINK_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise RuntimeError(f"gcc could not build {NO_NETLINK_SOURCE.name}:\n{built.stderr}")
    return library


def launch(browser_type: BrowserType, no_netlink: Path | None) -> Browser:
    """Chromium as every browser test uses it, with `no_netlink` (`build_no_netlink`)
    preloaded. None leaves it out, only for the test that shows what it prevents."""
    env: dict[str, str | float | bool] = dict(os.environ)
    if no_netlink is not None:
        preload = env.get("LD_PRELOAD")
        env["LD_PRELOAD"] = f"{no_netlink} {preload}" if preload else str(no_netlink)
    return browser_type.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=env)
