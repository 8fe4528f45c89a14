"""Two small, real package indexes for tests: a PyPI "simple" index and an npm registry.

Both are stdlib `ThreadingHTTPServer`s on a free 127.0.0.1 port in a background thread (start
with `start()` or use as a context manager; `base_url` has no trailing slash). They serve only
what the test put in them, built here by hand, so the real `pip` and `npm` install from them
with no network and no build tools:

- `PyPIIndex` answers PEP 503 HTML (`/simple/`, `/simple/<normalized-name>/`, links with
  `#sha256=` fragments) and, when the client asks for it in `Accept` as pip does, PEP 691 JSON;
  distribution files are under `/files/<filename>`. `build_wheel` writes a minimal valid
  pure-Python wheel (METADATA, WHEEL, RECORD with sha256 hashes) with `zipfile`.
- `NpmRegistry` answers `GET /<name>` (scoped as `/@scope%2fname` or `/@scope/name`) with the
  package document and `GET /<name>/-/<basename>-<version>.tgz` with the tarball, whose
  absolute URL in `dist.tarball` is built from the request's `Host` header (so it stays right
  when the registry is reached under another address, e.g. through a proxy). Unknown packages
  get 404 `{"error":"Not found"}`. `build_npm_tarball` makes the `package/`-prefixed tarball.

Every request is recorded (method, path as sent, headers); `downloads` / `download_count`
tell which distribution files or tarballs were fetched.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import io
import json
import re
import tarfile
import threading
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any, Self, cast
from urllib.parse import quote, unquote, urlsplit

# --- shared server machinery -----------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # the request target as sent (origin form), query included
    headers: dict[str, str]  # lower-case names


@dataclass
class _Reply:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], owner: _IndexServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as pip and npm expect

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def do_POST(self) -> None:
        self._serve(send_body=True)

    def do_PUT(self) -> None:
        self._serve(send_body=True)

    def do_DELETE(self) -> None:
        self._serve(send_body=True)

    def _serve(self, *, send_body: bool) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # drained, so the kept-alive connection stays in step
        target = urlsplit(self.path)  # an absolute-form target (from a proxy) keeps its path
        path = target.path + (f"?{target.query}" if target.query else "")
        request = RecordedRequest(
            self.command, path, {k.lower(): v for k, v in self.headers.items()}
        )
        owner = cast(_HTTPServer, self.server).owner
        reply = owner._handle(request)
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the requests are recorded instead


class _IndexServer:
    """The lifecycle and request log both indexes share. The port is bound at construction."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._httpd = _HTTPServer((host, port), self)
        self.port = int(self._httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=type(self).__name__,
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, request: RecordedRequest) -> _Reply:
        with self._lock:
            self._requests.append(request)
        if request.method not in ("GET", "HEAD"):
            return _json_reply(405, {"error": "Method not allowed"})
        try:
            return self._answer(request)
        except Exception as error:  # a bug here should show up as a 500, not a hang
            return _Reply(500, f"{type(error).__name__}: {error}".encode())

    def _answer(self, request: RecordedRequest) -> _Reply:
        raise NotImplementedError  # the PyPI index and the npm registry each answer their own way


def _json_reply(status: int, document: Any, content_type: str = "application/json") -> _Reply:
    return _Reply(status, json.dumps(document, indent=1).encode(), content_type)


# --- PyPI ------------------------------------------------------------------------------------

_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_SIMPLE_HTML = "application/vnd.pypi.simple.v1+html"


def normalize_name(name: str) -> str:
    """PEP 503: runs of `-`, `_`, `.` become one `-`, lower-cased."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def wheel_filename(name: str, version: str) -> str:
    return f"{normalize_name(name).replace('-', '_')}-{version}-py3-none-any.whl"


def wheel_bytes(
    name: str,
    version: str,
    module_source: Mapping[str, str],
    *,
    requires: Sequence[str] = (),
    summary: str = "",
) -> bytes:
    """A pure-Python wheel's bytes; `module_source` maps paths in the wheel (e.g.
    `hello_mosoo.py`, `pkg/__init__.py`) to their source. Deterministic (fixed timestamps)."""
    distribution = normalize_name(name).replace("-", "_")
    dist_info = f"{distribution}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {summary or f'{name} for Mosoo tests'}",
        *(f"Requires-Dist: {requirement}" for requirement in requires),
    ]
    top_level = sorted({PurePosixPath(path).parts[0].removesuffix(".py") for path in module_source})
    entries: list[tuple[str, bytes]] = []
    for path, source in module_source.items():
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise ValueError(f"not a relative path inside the wheel: {path!r}")
        entries.append((str(pure), source.encode()))
    entries += [
        (f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: mosoo-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
        ),
        (f"{dist_info}/top_level.txt", ("\n".join(top_level) + "\n").encode()),
    ]
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def build_wheel(
    directory: Path,
    name: str,
    version: str,
    module_source: Mapping[str, str],
    *,
    requires: Sequence[str] = (),
    summary: str = "",
) -> Path:
    """Write `<directory>/<name>-<version>-py3-none-any.whl` (see `wheel_bytes`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / wheel_filename(name, version)
    path.write_bytes(wheel_bytes(name, version, module_source, requires=requires, summary=summary))
    return path


@dataclass(frozen=True)
class DistributionFile:
    project: str  # normalized
    version: str
    filename: str
    data: bytes
    listed_sha256: str | None = None  # the hash the pages give, when not the real one

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def page_sha256(self) -> str:
        return self.listed_sha256 or self.sha256


def _prefers_json(accept: str) -> bool:
    """Whether the best-rated type `Accept` allows among the simple API's is JSON."""
    ratings: dict[str, float] = {}
    for media_range in accept.split(","):
        kind, *params = (part.strip() for part in media_range.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        ratings[kind.lower()] = max(quality, ratings.get(kind.lower(), 0.0))
    json_q = ratings.get(_SIMPLE_JSON, 0.0)
    html_q = max(ratings.get(_SIMPLE_HTML, 0.0), ratings.get("text/html", 0.0))
    return json_q > 0 and json_q >= html_q


class PyPIIndex(_IndexServer):
    """A PEP 503 (and PEP 691 JSON, unless `json_api=False`) index at `simple_url`."""

    def __init__(self, *, json_api: bool = True, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self.json_api = json_api
        self._files: dict[str, DistributionFile] = {}  # by filename

    @property
    def simple_url(self) -> str:
        """What `pip install --index-url` takes."""
        return f"{self.base_url}/simple/"

    def add_package(
        self,
        name: str,
        version: str,
        module_source: Mapping[str, str],
        *,
        requires: Sequence[str] = (),
        summary: str = "",
    ) -> DistributionFile:
        """Build a wheel in memory (see `wheel_bytes`) and serve it."""
        data = wheel_bytes(name, version, module_source, requires=requires, summary=summary)
        return self.add_file(name, version, wheel_filename(name, version), data)

    def add_wheel(self, path: Path) -> DistributionFile:
        """Serve a wheel file built beforehand (e.g. by `build_wheel`)."""
        project, version = path.name.split("-")[:2]
        return self.add_file(project, version, path.name, path.read_bytes())

    def add_file(
        self, project: str, version: str, filename: str, data: bytes, *, listed_sha256: str = ""
    ) -> DistributionFile:
        """Serve any distribution file under `project`, replacing one of the same name. With
        `listed_sha256` the pages give that hash instead of the file's (a tampered file)."""
        if "/" in filename or not filename:
            raise ValueError(f"not a file name: {filename!r}")
        file = DistributionFile(
            normalize_name(project), version, filename, data, listed_sha256 or None
        )
        with self._lock:
            self._files[filename] = file
        return file

    @property
    def files(self) -> list[DistributionFile]:
        with self._lock:
            return list(self._files.values())

    @property
    def downloads(self) -> list[str]:
        """The file names fetched (GET `/files/...`), in order, once per fetch."""
        with self._lock:
            known = set(self._files)
            paths = [r.path.split("?")[0] for r in self._requests if r.method == "GET"]
        names = [unquote(p.removeprefix("/files/")) for p in paths if p.startswith("/files/")]
        return [name for name in names if name in known]

    def download_count(self, project: str, version: str | None = None) -> int:
        with self._lock:
            files = dict(self._files)
        count = 0
        for filename in self.downloads:
            file = files[filename]
            if file.project == normalize_name(project) and version in (None, file.version):
                count += 1
        return count

    def _answer(self, request: RecordedRequest) -> _Reply:
        path = request.path.split("?")[0]
        if path in ("", "/", "/simple"):
            return _Reply(301, headers={"Location": "/simple/"})
        if path == "/simple/":
            return self._project_list(request)
        if path.startswith("/simple/"):
            name = unquote(path.removeprefix("/simple/"))
            if name.endswith("/"):
                name = name[:-1]
            elif "/" not in name:
                return _Reply(301, headers={"Location": f"/simple/{normalize_name(name)}/"})
            if "/" in name:
                return _Reply(404, b"Not Found")
            if name != normalize_name(name):
                return _Reply(301, headers={"Location": f"/simple/{normalize_name(name)}/"})
            return self._project_page(request, name)
        if path.startswith("/files/"):
            with self._lock:
                file = self._files.get(unquote(path.removeprefix("/files/")))
            if file is None:
                return _Reply(404, b"Not Found")
            return _Reply(200, file.data, "application/octet-stream")
        return _Reply(404, b"Not Found")

    def _wants_json(self, request: RecordedRequest) -> bool:
        return self.json_api and _prefers_json(request.headers.get("accept", ""))

    def _project_list(self, request: RecordedRequest) -> _Reply:
        projects = sorted({file.project for file in self.files})
        if self._wants_json(request):
            document = {"meta": {"api-version": "1.0"}, "projects": [{"name": p} for p in projects]}
            return _json_reply(200, document, _SIMPLE_JSON)
        links = "\n".join(f'<a href="{quote(p)}/">{html.escape(p)}</a><br/>' for p in projects)
        return self._html("Simple index", links)

    def _project_page(self, request: RecordedRequest, project: str) -> _Reply:
        files = sorted(
            (file for file in self.files if file.project == project), key=lambda f: f.filename
        )
        if not files:
            return _Reply(404, b"Not Found")
        # Relative links: they resolve against whatever address the page was fetched from.
        urls = [f"../../files/{quote(file.filename)}" for file in files]
        if self._wants_json(request):
            document = {
                "meta": {"api-version": "1.0"},
                "name": project,
                "files": [
                    {"filename": file.filename, "url": url, "hashes": {"sha256": file.page_sha256}}
                    for file, url in zip(files, urls, strict=True)
                ],
            }
            return _json_reply(200, document, _SIMPLE_JSON)
        links = "\n".join(
            f'<a href="{html.escape(url)}#sha256={file.page_sha256}">{html.escape(file.filename)}</a>'
            "<br/>"
            for file, url in zip(files, urls, strict=True)
        )
        return self._html(f"Links for {project}", links)

    @staticmethod
    def _html(title: str, body: str) -> _Reply:
        page = (
            "<!DOCTYPE html>\n<html>\n<head>\n"
            '<meta name="pypi:repository-version" content="1.0">\n'
            f"<title>{html.escape(title)}</title>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n"
        )
        return _Reply(200, page.encode(), "text/html; charset=utf-8")


# --- npm -------------------------------------------------------------------------------------


def _package_json(
    name: str,
    version: str,
    *,
    main: str = "index.js",
    dependencies: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "name": name,
        "version": version,
        "description": f"{name} for Mosoo tests",
        "main": main,
        "license": "MIT",
    }
    if dependencies:
        manifest["dependencies"] = dict(dependencies)
    return manifest


def build_npm_tarball(
    name: str,
    version: str,
    files: Mapping[str, str],
    *,
    main: str = "index.js",
    dependencies: Mapping[str, str] | None = None,
) -> bytes:
    """A gzipped tarball with every file under `package/`, as `npm pack` makes. A
    `package.json` is written from the arguments unless `files` has one. Deterministic."""
    entries = dict(files)
    if "package.json" not in entries:
        manifest = _package_json(name, version, main=main, dependencies=dependencies)
        entries["package.json"] = json.dumps(manifest, indent=2) + "\n"
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.USTAR_FORMAT) as archive,
    ):
        for path in sorted(entries):
            pure = PurePosixPath(path)
            if pure.is_absolute() or ".." in pure.parts or not pure.parts:
                raise ValueError(f"not a relative path inside the package: {path!r}")
            data = entries[path].encode()
            info = tarfile.TarInfo(f"package/{pure}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 499162500  # what npm pack stamps (1985-10-26)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def npm_integrity(tarball: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()


@dataclass(frozen=True)
class NpmVersion:
    name: str
    version: str
    manifest: dict[str, Any]  # package.json's fields, without `dist`
    tarball: bytes

    @property
    def tarball_name(self) -> str:
        return f"{self.name.rpartition('/')[2]}-{self.version}.tgz"

    @property
    def shasum(self) -> str:
        return hashlib.sha1(self.tarball).hexdigest()

    @property
    def integrity(self) -> str:
        return npm_integrity(self.tarball)


class NpmRegistry(_IndexServer):
    """An npm registry at `base_url` (what `npm install --registry` takes)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self._packages: dict[str, dict[str, NpmVersion]] = {}
        self._tags: dict[str, dict[str, str]] = {}

    def add_package(
        self,
        name: str,
        version: str,
        files: Mapping[str, str],
        *,
        main: str = "index.js",
        dependencies: Mapping[str, str] | None = None,
        tag: str | None = "latest",
    ) -> NpmVersion:
        """Build the tarball (see `build_npm_tarball`) and publish it; `tag` (default
        `latest`) then points at this version."""
        tarball = build_npm_tarball(name, version, files, main=main, dependencies=dependencies)
        if "package.json" in files:
            manifest = json.loads(files["package.json"])
        else:
            manifest = _package_json(name, version, main=main, dependencies=dependencies)
        return self.add_tarball(name, version, tarball, manifest, tag=tag)

    def add_tarball(
        self,
        name: str,
        version: str,
        tarball: bytes,
        manifest: Mapping[str, Any] | None = None,
        *,
        tag: str | None = "latest",
    ) -> NpmVersion:
        """Publish any tarball (also a broken one) with the given package.json fields."""
        fields = dict(manifest or _package_json(name, version))
        fields.update(name=name, version=version)
        published = NpmVersion(name, version, fields, tarball)
        with self._lock:
            self._packages.setdefault(name, {})[version] = published
            tags = self._tags.setdefault(name, {})
            if tag:
                tags[tag] = version
        return published

    def package_url(self, name: str) -> str:
        return f"{self.base_url}/{quote(name, safe='@')}"

    @property
    def downloads(self) -> list[str]:
        """`name@version` of each tarball fetched (GET), in order."""
        fetched = []
        for request in self.requests:
            if request.method != "GET":
                continue
            found = self._lookup(request.path)
            if found is not None and found[1] is not None:
                fetched.append(f"{found[1].name}@{found[1].version}")
        return fetched

    def download_count(self, name: str, version: str | None = None) -> int:
        wanted = f"{name}@{version}" if version else None
        return sum(
            1
            for item in self.downloads
            if (item == wanted if wanted else item.rpartition("@")[0] == name)
        )

    def _lookup(self, path: str) -> tuple[str, NpmVersion | None] | None:
        """(name, None) for a package document, (name, version) for a tarball, None if
        neither exists."""
        parts = [unquote(part) for part in path.split("?")[0].strip("/").split("/")]
        if parts and parts[0].startswith("@") and "/" in parts[0]:  # `/@scope%2fname`
            parts = [*parts[0].split("/", 1), *parts[1:]]
        count = 2 if parts and parts[0].startswith("@") else 1
        name, rest = "/".join(parts[:count]), parts[count:]
        with self._lock:
            versions = dict(self._packages.get(name, {}))
        if not versions:
            return None
        if not rest:
            return name, None
        if len(rest) == 2 and rest[0] == "-":
            for published in versions.values():
                if published.tarball_name == rest[1]:
                    return name, published
        return None

    def _answer(self, request: RecordedRequest) -> _Reply:
        found = self._lookup(request.path)
        if found is None:
            return _json_reply(404, {"error": "Not found"})
        name, published = found
        if published is not None:
            return _Reply(200, published.tarball, "application/octet-stream")
        host = request.headers.get("host") or f"{self.host}:{self.port}"
        return _json_reply(200, self._document(name, f"http://{host}"))

    def _document(self, name: str, origin: str) -> dict[str, Any]:
        with self._lock:
            versions = dict(self._packages[name])
            tags = dict(self._tags.get(name, {}))
        if "latest" not in tags:
            tags["latest"] = list(versions)[-1]
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        document_versions = {}
        for version, published in versions.items():
            path = f"/{quote(name, safe='@/')}/-/{quote(published.tarball_name)}"
            document_versions[version] = {
                **published.manifest,
                "_id": f"{name}@{version}",
                "dist": {
                    "tarball": origin + path,
                    "shasum": published.shasum,
                    "integrity": published.integrity,
                },
            }
        return {
            "_id": name,
            "name": name,
            "dist-tags": tags,
            "versions": document_versions,
            "time": {"created": now, "modified": now, **dict.fromkeys(versions, now)},
        }
