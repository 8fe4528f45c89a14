"""The driver's import threads: an import that another thread's import left half-initialized
is tried again (CI saw a run fail with "partially initialized module 'httpx' has no attribute
'Timeout'"); any other import error, and a module that stays half-initialized, fail at once."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from driver.backends import base

PARTIAL = "partially initialized module 'httpx' has no attribute 'Timeout' (most likely due to a circular import)"


@pytest.fixture
def imports(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(base, "_IMPORT_RETRY_PAUSE_SECONDS", 0)
    return []


def _failing(imports: list[str], errors: list[Exception]) -> Callable[[str], ModuleType]:
    def fake_import(name: str) -> ModuleType:
        imports.append(name)
        if errors:
            raise errors.pop(0)
        return ModuleType(name)

    return fake_import


@pytest.mark.parametrize(
    "error",
    [
        AttributeError(PARTIAL),
        ImportError("cannot import name 'Timeout' from partially initialized module 'httpx'"),
    ],
    ids=["attribute", "from-import"],
)
def test_a_half_initialized_import_is_tried_again_and_returns_the_module(
    error: Exception, imports: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib, "import_module", _failing(imports, [error]))
    assert base.import_module("openai").__name__ == "openai"
    assert imports == ["openai", "openai"]


def test_any_other_import_error_is_raised_at_once(
    imports: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = ModuleNotFoundError("No module named 'openai'")
    monkeypatch.setattr(importlib, "import_module", _failing(imports, [missing]))
    with pytest.raises(ModuleNotFoundError):
        base.import_module("openai")
    assert imports == ["openai"]


def test_a_real_circular_import_still_fails_after_the_last_attempt(
    imports: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two modules that need each other's names while both are initializing: a genuine
    # circular import, half-initialized on every attempt.
    (tmp_path / "circle_a.py").write_text("import circle_b\nVALUE = circle_b.VALUE\n")
    (tmp_path / "circle_b.py").write_text(
        textwrap.dedent("""\
            import circle_a
            VALUE = circle_a.VALUE
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    real_import = importlib.import_module

    def counted(name: str) -> ModuleType:
        imports.append(name)
        return real_import(name)

    monkeypatch.setattr(importlib, "import_module", counted)
    with pytest.raises(AttributeError, match="partially initialized module"):
        base.import_module("circle_a")
    assert imports == ["circle_a"] * base._IMPORT_ATTEMPTS
    assert "circle_a" not in sys.modules and "circle_b" not in sys.modules
