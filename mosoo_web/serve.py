"""`mosoo web`'s entry point: Reflex's own CLI, minus the frontend build when nothing changed.

`reflex run --env prod` compiles the pages into the web folder (`.web`, or
`REFLEX_WEB_WORKDIR`) and then runs vite over it at every start: about 12 s of a 21 s start
on a 2-core machine, and the same bytes each time the pages, the port and the settings are
unchanged. Here the build runs only when the compiled input differs from the input of the
build that is on disk: a digest of every file Reflex wrote into the web folder (pages,
`env.json` with the port and URLs, `package.json`, public assets), the frontend's build-time
environment and Reflex's version, stored beside the build once it succeeded. A build that
fails or is cut short leaves no stamp, so the next start builds again.

Run as `python -m mosoo_web.serve run --env prod ...` (`mosoo web` does): the arguments are
Reflex's.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

STAMP = "mosoo-build.sha256"
# What the build writes or reads without being its input: its own output, vite's cache,
# the installed packages (package.json and the lock file name them) and Reflex's record of
# its last run time, which changes at every start.
NOT_INPUT = frozenset({"build", ".react-router", "node_modules", "reflex.json", STAMP})
ENV_PREFIXES = ("VITE_", "NODE_")


def _input_files(web_dir: Path) -> Iterator[Path]:
    for path in sorted(web_dir.iterdir()):
        if path.name in NOT_INPUT:
            continue
        if path.is_dir() and not path.is_symlink():
            yield from sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            yield path


def input_digest(web_dir: Path, version: str, environ: dict[str, str]) -> str:
    """The digest of what a frontend build in `web_dir` would be made from."""
    digest = hashlib.sha256(f"reflex {version}\n".encode())
    for name in sorted(k for k in environ if k.startswith(ENV_PREFIXES)):
        digest.update(f"env {name}={environ[name]}\n".encode())
    for path in _input_files(web_dir):
        digest.update(f"file {path.relative_to(web_dir).as_posix()}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def build_unless_unchanged(
    build: Callable[[], None], web_dir: Path, built_page: Path, version: str
) -> Callable[[], None]:
    """`build`, wrapped to skip when the digest stamped by the last successful build matches
    and its output (`built_page`, the page the server falls back to) is still there."""

    def maybe_build() -> None:
        stamp = web_dir / STAMP
        digest = input_digest(web_dir, version, dict(os.environ))
        if built_page.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
            print("mosoo web: the frontend is unchanged since its last build; reusing it")
            return
        stamp.unlink(missing_ok=True)
        build()
        stamp.write_text(digest + "\n")

    return maybe_build


def main() -> None:
    # Reflex is imported here, not at module level: the unit tests of the digest need none
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
