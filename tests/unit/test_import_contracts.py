"""The layer rules of ARCHITECTURE.md section 2 (and docs/design-notes.md) are checked by
`lint-imports` (contracts in pyproject.toml); here each rule is shown to catch a deliberate
violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # The copy comes first on the path, so the linter reads it and not the installed tree.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("tree")
    for package in ("mosoo_core", "mosoo_web", "driver"):
        shutil.copytree(
            ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", ".web")
        )
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        ("mosoo_core/_probe.py", "import mosoo_web.api\n", "Layers"),
        ("driver/_probe.py", "import mosoo_core.settings\n", "Layers"),
        ("mosoo_core/_probe.py", "import driver.connection\n", "wire protocol"),
        ("mosoo_web/probe.py", "import mosoo_core.identity._sessions\n", "Private modules"),
        (
            "mosoo_core/files/_probe.py",
            "from mosoo_core.sessions import driver_plane\n",
            "driver-facing",
        ),
        (
            "mosoo_web/probe.py",
            "from mosoo_core.sessions.driver_plane import append_events\n",
            "driver-facing",
        ),
        # sessions imports identity; identity importing sessions back closes a cycle.
        ("mosoo_core/identity/_probe.py", "import mosoo_core.sessions\n", "No package cycles"),
        # Every service reads tables; a table module importing a service closes one too.
        ("mosoo_core/tables/probe.py", "import mosoo_core.agents\n", "No package cycles"),
    ],
)
def test_a_violation_breaks_its_contract(tree: Path, module: str, source: str, broken: str) -> None:
    probe = tree / module
    probe.write_text(source)
    try:
        result = _lint(tree)
    finally:
        probe.unlink()
    assert result.returncode != 0
    # Every contract is named in the summary; only the broken ones in the report after it.
    report = result.stdout.partition("Broken contracts")[2]
    assert broken in report, result.stdout
