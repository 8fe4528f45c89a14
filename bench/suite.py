"""The test suite against an earlier one, on the behaviour both test: pytest's wall time.

    .venv/bin/python bench/suite.py --baseline a81f64d [--rounds 1] [--rename OLD=NEW ...]

The suite grows with every feature, so its whole time says little about whether testing got
faster. This compares like with like:

- the baseline: a clone of that commit in a temp folder, set up by its own
  `scripts/setup.sh test` (its venv, its sandbox image), then its whole pytest run on SQLite
  and PostgreSQL, as its `make test` ran pytest;
- this checkout: only the tests that already existed at the baseline (same file, same
  function; a test file git sees as renamed is followed, a function renamed since is named
  with `--rename old_name=new_name`), run as `make test` runs pytest today
  (scripts/suite.sh: its parallel workers, its choice of databases per test).

Those tests may assert more today than they did; they never assert less unless a test was
weakened, which a reader of the diff would see. Old tests with no counterpart here are
listed, so nothing is dropped silently. Both sides run with PYTHONDONTWRITEBYTECODE unset
(scripts/suite.sh unsets it for this checkout), turn about, `--rounds` times; each line gives
pytest's wall time and what it reported. Nothing else should run on the machine meanwhile:
the suite is bound by CPU.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FUNCTION = re.compile(r"^\s*(?:async\s+)?def (test_\w+)\(", re.MULTILINE)
# pytest's last line, framed by "=" or (with -q) bare: "1 failed, 1238 passed in 371.99s (0:06:11)"
SUMMARY = re.compile(r"^=* ?(\d+ (?:passed|failed|errors?)\b.*?) in [\d.]+s", re.MULTILINE)


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def _test_functions(commit: str) -> set[tuple[str, str]]:
    """(file, function) of every test function in the test modules under tests/ at `commit`."""
    found: set[tuple[str, str]] = set()
    for name in _git("ls-tree", "-r", "--name-only", commit, "tests").split():
        if Path(name).name.startswith("test_") and name.endswith(".py"):
            text = _git("show", f"{commit}:{name}")
            found.update((name, function) for function in TEST_FUNCTION.findall(text))
    return found


def _renamed_files(commit: str) -> dict[str, str]:
    """Where each test file renamed since `commit` is now: the renames commit by commit,
    oldest first, chained (a diff of the two ends misses a file edited much after its move)."""
    out = _git(
        "log",
        "-M",
        "--diff-filter=R",
        "--name-status",
        "--format=",
        "--reverse",
        f"{commit}..HEAD",
        "--",
        "tests",
    )
    renamed: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("R"):
            _, old, new = line.split("\t")
            for start, now in list(renamed.items()):
                if now == old:
                    renamed[start] = new
            renamed.setdefault(old, new)
    return renamed


def _same_tests(commit: str, renames: dict[str, str]) -> tuple[list[str], list[str], int]:
    """This checkout's test ids for the baseline's test functions, the baseline's functions
    with no counterpart, and how many functions the baseline had."""
    files = _renamed_files(commit)
    wanted: dict[tuple[str, str], str] = {}
    for old_file, old_function in _test_functions(commit):
        new = (files.get(old_file, old_file), renames.get(old_function, old_function))
        wanted[new] = f"{old_file}::{old_function}"
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"],
        cwd=ROOT,
        env=_suite_env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    ids, matched = [], set()
    for line in collected.splitlines():
        if "::" not in line:
            continue
        key = (line.split("::")[0], line.split("::")[-1].split("[")[0])
        if key in wanted:
            ids.append(line.strip())
            matched.add(key)
    missing = sorted(wanted[key] for key in wanted.keys() - matched)
    return ids, missing, len(wanted)


def _suite_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        MOSOO_TEST_DATABASES="sqlite,postgresql",
        REFLEX_USE_SYSTEM_BUN="1",
        REFLEX_TELEMETRY_ENABLED="false",
    )
    return env


def _timed(command: list[str], cwd: Path, log: Path) -> tuple[float, str, int]:
    started = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.run(
            command, cwd=cwd, env=_suite_env(), stdout=out, stderr=subprocess.STDOUT
        ).returncode
    elapsed = time.monotonic() - started
    summaries = SUMMARY.findall(log.read_text(errors="replace"))
    return elapsed, (summaries[-1] if summaries else "no summary"), status


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", required=True, help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW")
    parser.add_argument("--keep", action="store_true", help="keep the baseline's clone")
    args = parser.parse_args()
    renames = dict(item.split("=", 1) for item in args.rename)
    commit = _git("rev-parse", "--short", args.baseline).strip()

    ids, missing, functions = _same_tests(commit, renames)
    print(f"baseline {commit}: {functions} test functions; {len(ids)} test ids here run them")
    for name in missing:
        print(f"  no counterpart here: {name}")
    work = Path(tempfile.mkdtemp(prefix="mosoo-bench-suite-"))
    # Open to others as any clone is: the sandbox user and postgres must traverse it.
    work.chmod(0o755)
    clone = work / "baseline"
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        _git("checkout", "-q", commit, cwd=clone)
        print("setting the baseline up (its scripts/setup.sh test) ...", flush=True)
        subprocess.run(
            ["bash", "scripts/setup.sh", "test"],
            cwd=clone,
            check=True,
            stdout=subprocess.DEVNULL,
            env=_suite_env(),
        )
        selection = work / "same-tests.txt"
        selection.write_text("\n".join(ids) + "\n")
        old = [str(clone / ".venv/bin/python"), "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        new = [
            "bash",
            "-c",
            'source scripts/suite.sh && run_pytest "$(pytest_workers 2)" -q "@$0"',
            str(selection),
        ]
        times: dict[str, list[float]] = {"baseline": [], "this": []}
        for round_ in range(1, args.rounds + 1):
            for side, command, cwd in (("baseline", old, clone), ("this", new, ROOT)):
                log = work / f"{side}-{round_}.log"
                elapsed, summary, status = _timed(command, cwd, log)
                times[side].append(elapsed)
                flag = "" if status == 0 else f" (exit {status}; log kept: {log})"
                print(f"round {round_} {side:<8} {elapsed / 60:5.1f} min: {summary}{flag}")
                if status != 0:
                    args.keep = True
        old_m, new_m = statistics.median(times["baseline"]), statistics.median(times["this"])
        print(
            f"median: baseline {old_m / 60:.1f} min, this {new_m / 60:.1f} min "
            f"({new_m / old_m:.2f}x) for the same test functions"
        )
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
