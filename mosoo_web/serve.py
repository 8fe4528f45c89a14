"""`mosoo web`'s entry point: Reflex's own CLI, minus the frontend build when nothing changed.

`reflex run --env prod` compiles the pages into the web folder (`.web`, or
`REFLEX_WEB_WORKDIR`) and then runs vite over it at every start: about 12 s of a 21 s start
on a 2-core machine, and the same bytes each time the pages, the port and the settings are
unchanged. Here the build runs only when its input differs from the input of the build that
is on disk: the sha256 of every file Reflex wrote into the web folder (pages, `env.json` with
the port and URLs, `package.json`, public assets), of the frontend's build-time environment
and of Reflex's version, stored beside the build once it succeeded. A build that fails or is
cut short leaves no stamp, so the next start builds again; a start that builds says which
inputs changed.

Run as `python -m mosoo_web.serve run --env prod ...` (`mosoo web` does): the arguments are
Reflex's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

STAMP = "mosoo-build-inputs.json"
# What the build writes or reads without being its input: its own output, vite's cache,
# the installed packages (package.json and the lock file name them) and Reflex's record of
# its last run time, which changes at every start.
NOT_INPUT = frozenset({"build", ".react-router", "node_modules", "reflex.json", STAMP})
ENV_PREFIXES = ("VITE_", "NODE_")
# What a start that reuses the build prints (tests and bench/web_start.py look for it).
REUSING = "mosoo web: the frontend is unchanged since its last build; reusing it"


def _input_files(web_dir: Path) -> Iterator[Path]:
    for path in sorted(web_dir.iterdir()):
        if path.name in NOT_INPUT:
            continue
        if path.is_dir() and not path.is_symlink():
            yield from sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            yield path


def build_inputs(web_dir: Path, version: str, environ: dict[str, str]) -> dict[str, str]:
    """What a frontend build in `web_dir` would be made from: each input's name (a file's
    path in the web folder, `env NAME` for the environment, `reflex` for the version) and
    its sha256."""

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    inputs = {"reflex": sha(version.encode())}
    for name in sorted(k for k in environ if k.startswith(ENV_PREFIXES)):
        inputs[f"env {name}"] = sha(environ[name].encode())
    for path in _input_files(web_dir):
        inputs[path.relative_to(web_dir).as_posix()] = sha(path.read_bytes())
    return inputs


def _changed(before: dict[str, str], now: dict[str, str]) -> list[str]:
    return sorted(name for name in before.keys() | now.keys() if before.get(name) != now.get(name))


def _stamped(stamp: Path) -> dict[str, str]:
    try:
        inputs = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return {}
    return inputs if isinstance(inputs, dict) else {}


def build_unless_unchanged(
    build: Callable[[], None], web_dir: Path, built_page: Path, version: str
) -> Callable[[], None]:
    """`build`, wrapped to skip when the inputs stamped by the last successful build are the
    same now and its output (`built_page`, the page the server falls back to) is still
    there. Otherwise it says what changed (an operator's answer to "why did it build?")."""

    def maybe_build() -> None:
        stamp = web_dir / STAMP
        inputs = build_inputs(web_dir, version, dict(os.environ))
        before = _stamped(stamp)
        changed = _changed(before, inputs)
        if not changed and built_page.is_file():
            print(REUSING)
            return
        if not before:
            print("mosoo web: building the frontend (no earlier build here)")
        else:
            shown = ", ".join(changed[:5]) + (
                f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            )
            print(f"mosoo web: building the frontend (changed: {shown or 'its output is gone'})")
        stamp.unlink(missing_ok=True)
        build()
        stamp.write_text(json.dumps(inputs, indent=0, sort_keys=True) + "\n")

    return maybe_build


def main() -> None:
    # Reflex is imported here, not at module level: the unit tests of the inputs need none
    # of its import-time configuration.
    import reflex.reflex
    from reflex import constants
    from reflex.utils import build, prerequisites

    web_dir = prerequisites.get_web_dir()
    built_page = web_dir / constants.Dirs.STATIC / "404.html"
    # setup_frontend_prod calls the module's `build` by name, so replacing it there is the
    # whole change; the rest of the start (compile, env.json, backend) is Reflex's own.
    build.build = build_unless_unchanged(build.build, web_dir, built_page, constants.Reflex.VERSION)
    reflex.reflex.cli()


if __name__ == "__main__":
    main()
