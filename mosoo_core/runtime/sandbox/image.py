"""The sandbox image (driver/Dockerfile), built offline and tagged by its content.

No container registry is reachable on our machines (MACHINE.md), so the base image comes
from, in order: MOSOO_SANDBOX_BASE_IMAGE; a local `python:3.11-slim`; our cached
`mosoo-base:bookworm`; a `docker pull python:3.11-slim`; else a Debian root filesystem made
with debootstrap (Debian mirrors are reachable) and `docker import`ed as
`mosoo-base:bookworm`. Python packages are downloaded as wheels on the host and installed in
the image with `pip install --no-index`; the build itself runs with no network at all.

The tag is `mosoo-sandbox:<12 hex>` over the Dockerfile, the driver sources, the driver's
requirements and the base image id, so `ensure_sandbox_image` is a no-op when nothing
changed.

The `process` backend needs the same driver and packages outside Docker:
`ensure_process_runtime` makes a directory (a virtualenv of the system Python plus a copy of
the driver) that it mounts read-only at /opt/mosoo.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import docker
from docker import errors as docker_errors

from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox._base import SandboxError

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
MOSOO_DRIVER_SCRIPT = '#!/bin/sh\nexec /opt/mosoo/venv/bin/python -m driver.main "$@"\n'

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
        (context / "mosoo-driver").write_text(MOSOO_DRIVER_SCRIPT)
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


def _system_python() -> str:
    """A Python under /usr: the only tree the process backend shows inside a sandbox."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists():
            return candidate
    raise SandboxError(
        "the process backend needs a system python3 (apt-get install -y python3 python3-venv)"
    )


def ensure_process_runtime(parent: Path, echo: Echo = _quiet) -> Path:
    """A directory with venv/ (the driver's packages), driver/ and bin/mosoo-driver, made once
    per content hash; the process backend mounts it read-only at /opt/mosoo."""
    python = _system_python()
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    target = parent / _content_hash(b"process-runtime", python.encode(), version.encode())
    if (target / ".ready").exists():
        return target
    parent.mkdir(parents=True, exist_ok=True)
    os.chmod(parent, 0o755)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))
    try:
        os.chmod(staging, 0o755)
        echo(f"preparing the process sandbox runtime in {target}")
        _copy_driver(staging / "driver")
        (staging / "skills").mkdir()
        (staging / "bin").mkdir()
        script = staging / "bin" / "mosoo-driver"
        script.write_text(MOSOO_DRIVER_SCRIPT)
        script.chmod(0o755)
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
