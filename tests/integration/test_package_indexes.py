"""The test package indexes (tests/support/package_index.py) serve the real `pip` and `npm`.

Each client runs in a subprocess cut off from this machine's configuration: pip with
`--isolated` (no pip.conf, no PIP_* variables) and an environment without PIP_*; npm with
empty user and global npmrc files, no npm_config_* variables and its own cache. Neither
needs a database, and all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.package_index import (
    NpmRegistry,
    PyPIIndex,
    build_npm_tarball,
    build_wheel,
    npm_integrity,
)

pytestmark = pytest.mark.integration

_PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}

HELLO_SOURCE = """\
from mosoo_greeting import GREETING


def greet(name):
    return f"{GREETING}, {name}!"
"""

LEFT_PAD_SOURCE = """\
module.exports = function leftPad(text, length, fill) {
  text = String(text);
  fill = fill === undefined ? " " : String(fill);
  while (text.length < length) text = fill + text;
  return text;
};
"""

GREETER_SOURCE = """\
const leftPad = require("left-pad-mosoo");
module.exports = (name) => "[" + leftPad(name, 6, ".") + "]";
"""


def _client_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment without anything that configures pip, npm or a proxy."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.upper().startswith(("PIP_", "NPM_CONFIG_", "PYTHON"))
        and key.lower() not in _PROXY_VARIABLES
        and key != "VIRTUAL_ENV"
    }
    env.update(HOME=str(tmp_path / "home"), NO_PROXY="127.0.0.1,localhost")
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def _run(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


# --- pip -------------------------------------------------------------------------------------


@pytest.fixture
def pypi() -> Iterator[PyPIIndex]:
    with PyPIIndex() as index:
        index.add_package("mosoo-greeting", "0.1.0", {"mosoo_greeting.py": 'GREETING = "Hi"\n'})
        for version in ("1.0.0", "1.2.3"):
            index.add_package(
                "hello-mosoo",
                version,
                {"hello_mosoo/__init__.py": HELLO_SOURCE + f'VERSION = "{version}"\n'},
                requires=["mosoo-greeting>=0.1"],
            )
        yield index


def _pip_install(
    tmp_path: Path, index: PyPIIndex, requirement: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`pip install <requirement>` from the index alone into a fresh venv; its python."""
    venv = tmp_path / "venv"
    if not venv.exists():
        # No pip inside: the test's pip installs into it with --python, which is much faster.
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    result = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "--python",
            str(python),
            "install",
            "--index-url",
            index.simple_url,
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-input",
            "--retries",
            "0",
            "--timeout",
            "10",
            requirement,
        ],
        _client_env(tmp_path),
        tmp_path,
    )
    return result, python


def test_pip_installs_a_pinned_version_and_its_dependency_from_the_simple_index(
    tmp_path: Path, pypi: PyPIIndex
) -> None:
    result, python = _pip_install(tmp_path, pypi, "hello-mosoo==1.2.3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Successfully installed hello-mosoo-1.2.3 mosoo-greeting-0.1.0" in result.stdout

    check = _run(
        [
            str(python),
            "-c",
            "import hello_mosoo, importlib.metadata as m;"
            "print(hello_mosoo.greet('Mosoo'), hello_mosoo.VERSION, m.version('hello-mosoo'))",
        ],
        _client_env(tmp_path),
        tmp_path,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "Hi, Mosoo! 1.2.3 1.2.3"

    # Only the pinned wheel and the dependency were fetched, each once.
    assert sorted(pypi.downloads) == [
        "hello_mosoo-1.2.3-py3-none-any.whl",
        "mosoo_greeting-0.1.0-py3-none-any.whl",
    ]
    assert pypi.download_count("hello-mosoo") == 1
    assert pypi.download_count("Hello_Mosoo", "1.0.0") == 0
    assert "/simple/hello-mosoo/" in pypi.paths
    assert "/simple/mosoo-greeting/" in pypi.paths
    # pip asked for PEP 691 JSON and got it (the JSON page has no #sha256 fragments to
    # check, so pip verified the files against its `hashes`).
    page = next(r for r in pypi.requests if r.path == "/simple/hello-mosoo/")
    assert "application/vnd.pypi.simple.v1+json" in page.headers["accept"]


def test_pip_installs_from_the_html_pages_too(tmp_path: Path) -> None:
    with PyPIIndex(json_api=False) as index:
        index.add_wheel(
            build_wheel(tmp_path / "dist", "mosoo-greeting", "0.1.0", {"mosoo_greeting.py": ""})
        )
        result, python = _pip_install(tmp_path, index, "mosoo_greeting==0.1.0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert index.downloads == ["mosoo_greeting-0.1.0-py3-none-any.whl"]
    check = _run([str(python), "-c", "import mosoo_greeting"], _client_env(tmp_path), tmp_path)
    assert check.returncode == 0, check.stderr


def test_pip_fails_clearly_on_a_version_the_index_lacks(tmp_path: Path, pypi: PyPIIndex) -> None:
    result, _ = _pip_install(tmp_path, pypi, "hello-mosoo==9.9.9")
    assert result.returncode != 0
    assert "No matching distribution found for hello-mosoo==9.9.9" in result.stderr
    assert "from versions: 1.0.0, 1.2.3" in result.stderr
    assert pypi.downloads == []


def test_pip_refuses_a_file_whose_hash_does_not_match(tmp_path: Path, pypi: PyPIIndex) -> None:
    genuine = pypi.add_package("tampered", "1.0", {"tampered.py": ""})
    pypi.add_file(
        "tampered", "1.0", genuine.filename, genuine.data + b"\0", listed_sha256=genuine.sha256
    )
    result, _ = _pip_install(tmp_path, pypi, "tampered==1.0")
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr
    assert genuine.sha256 in result.stderr


def test_the_simple_index_pages_and_wheel_are_well_formed(tmp_path: Path, pypi: PyPIIndex) -> None:
    wheel = build_wheel(tmp_path, "Hello.Mosoo", "2.0", {"hello_mosoo.py": "X = 1\n"})
    assert wheel.name == "hello_mosoo-2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert names[-1] == "hello_mosoo-2.0.dist-info/RECORD"
        record = archive.read(names[-1]).decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = archive.read(path)
            assert int(size) == len(data)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}"
        metadata = archive.read("hello_mosoo-2.0.dist-info/METADATA").decode()
        assert "Name: Hello.Mosoo\nVersion: 2.0\n" in metadata
    pypi.add_wheel(wheel)

    html_page = _get(pypi.base_url + "/simple/hello-mosoo/", accept="text/html")
    served = {f.filename: f for f in pypi.files}
    for filename in ("hello_mosoo-1.2.3-py3-none-any.whl", "hello_mosoo-2.0-py3-none-any.whl"):
        sha = hashlib.sha256(served[filename].data).hexdigest()
        assert f'href="../../files/{filename}#sha256={sha}"' in html_page[1]
    assert html_page[0].startswith("text/html")

    content_type, body = _get(
        pypi.base_url + "/simple/", accept="application/vnd.pypi.simple.v1+json"
    )
    assert content_type == "application/vnd.pypi.simple.v1+json"
    assert [p["name"] for p in json.loads(body)["projects"]] == ["hello-mosoo", "mosoo-greeting"]

    # A non-normalized name redirects to the normalized page; an unknown one is a 404.
    assert (
        _get(pypi.base_url + "/simple/Hello_Mosoo/")[1]
        == _get(pypi.base_url + "/simple/hello-mosoo/")[1]
    )
    with pytest.raises(urllib.error.HTTPError) as missing:
        _get(pypi.base_url + "/simple/nothing-here/")
    assert missing.value.code == 404


def _get(url: str, accept: str = "*/*") -> tuple[str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


# --- npm -------------------------------------------------------------------------------------


@pytest.fixture
def npm_tools() -> tuple[str, str]:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("npm and node are needed to test the npm registry (not on PATH)")
    return npm, node


@pytest.fixture
def registry() -> Iterator[NpmRegistry]:
    with NpmRegistry() as server:
        server.add_package("left-pad-mosoo", "0.9.0", {"index.js": LEFT_PAD_SOURCE})
        server.add_package("left-pad-mosoo", "1.0.0", {"index.js": LEFT_PAD_SOURCE})
        server.add_package(
            "@mosoo/greeter",
            "2.0.0",
            {"lib/greeter.js": GREETER_SOURCE},
            main="lib/greeter.js",
            dependencies={"left-pad-mosoo": "^1.0.0"},
        )
        yield server


def _npm_install(
    tmp_path: Path, npm: str, registry: NpmRegistry, *specs: str
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "package.json").write_text('{"name": "t", "version": "0.0.0", "private": true}')
    # Empty user and global npmrc files (npm refuses one file for both).
    user_rc, global_rc = tmp_path / "user.npmrc", tmp_path / "global.npmrc"
    user_rc.write_text("")
    global_rc.write_text("")
    env = _client_env(tmp_path)
    env.update(npm_config_userconfig=str(user_rc), npm_config_globalconfig=str(global_rc))
    result = _run(
        [
            npm,
            "install",
            "--registry",
            registry.base_url + "/",
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--ignore-scripts",
            "--cache",
            str(tmp_path / "npm-cache"),
            "--prefix",
            str(project),
            "--fetch-retries",
            "0",
            *specs,
        ],
        env,
        project,
    )
    return result, project, env


def test_npm_installs_a_pinned_version_from_the_registry(
    tmp_path: Path, npm_tools: tuple[str, str], registry: NpmRegistry
) -> None:
    npm, node = npm_tools
    result, project, env = _npm_install(tmp_path, npm, registry, "left-pad-mosoo@1.0.0")
    assert result.returncode == 0, result.stdout + result.stderr

    check = _run([node, "-e", "console.log(require('left-pad-mosoo')('42', 5, '0'))"], env, project)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "00042"
    assert registry.downloads == ["left-pad-mosoo@1.0.0"]
    assert "/left-pad-mosoo" in registry.paths
    lock = json.loads((project / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/left-pad-mosoo"]["version"] == "1.0.0"


def test_npm_installs_a_scoped_package_and_its_dependency(
    tmp_path: Path, npm_tools: tuple[str, str], registry: NpmRegistry
) -> None:
    npm, node = npm_tools
    result, project, env = _npm_install(tmp_path, npm, registry, "@mosoo/greeter@2.0.0")
    assert result.returncode == 0, result.stdout + result.stderr

    check = _run([node, "-e", "console.log(require('@mosoo/greeter')('ab'))"], env, project)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "[....ab]"
    assert sorted(registry.downloads) == ["@mosoo/greeter@2.0.0", "left-pad-mosoo@1.0.0"]
    assert "/@mosoo%2fgreeter" in registry.paths
    assert "/@mosoo/greeter/-/greeter-2.0.0.tgz" in registry.paths


def test_npm_fails_clearly_on_an_unknown_package(
    tmp_path: Path, npm_tools: tuple[str, str], registry: NpmRegistry
) -> None:
    npm, _ = npm_tools
    result, _, _ = _npm_install(tmp_path, npm, registry, "no-such-package-mosoo@1.0.0")
    assert result.returncode != 0
    assert "E404" in result.stderr, result.stderr
    assert registry.downloads == []


def test_the_registry_documents_and_tarballs_are_well_formed(registry: NpmRegistry) -> None:
    content_type, body = _get(registry.package_url("@mosoo/greeter"))
    assert content_type == "application/json"
    document = json.loads(body)
    assert document["name"] == "@mosoo/greeter"
    assert document["dist-tags"] == {"latest": "2.0.0"}
    version = document["versions"]["2.0.0"]
    assert (version["name"], version["version"], version["main"]) == (
        "@mosoo/greeter",
        "2.0.0",
        "lib/greeter.js",
    )
    assert version["dist"]["tarball"] == (f"{registry.base_url}/@mosoo/greeter/-/greeter-2.0.0.tgz")
    with urllib.request.urlopen(version["dist"]["tarball"], timeout=10) as response:
        tarball = response.read()
    assert hashlib.sha1(tarball).hexdigest() == version["dist"]["shasum"]
    assert npm_integrity(tarball) == version["dist"]["integrity"]
    assert tarball == build_npm_tarball(
        "@mosoo/greeter",
        "2.0.0",
        {"lib/greeter.js": GREETER_SOURCE},
        main="lib/greeter.js",
        dependencies={"left-pad-mosoo": "^1.0.0"},
    )

    # The slash may also come unescaped; the latest tag follows the last published version.
    assert json.loads(_get(registry.base_url + "/@mosoo/greeter")[1])["name"] == "@mosoo/greeter"
    left_pad = json.loads(_get(registry.package_url("left-pad-mosoo"))[1])
    assert left_pad["dist-tags"]["latest"] == "1.0.0"
    assert sorted(left_pad["versions"]) == ["0.9.0", "1.0.0"]

    for missing in ("/nope", "/left-pad-mosoo/-/left-pad-mosoo-7.0.0.tgz", "/@mosoo%2fnope"):
        with pytest.raises(urllib.error.HTTPError) as error:
            _get(registry.base_url + missing)
        assert error.value.code == 404
        assert json.loads(error.value.read()) == {"error": "Not found"}
