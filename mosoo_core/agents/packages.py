"""`.agent` packages: export an Agent's profile as a zip, import one as a new draft.

A package never holds a secret: the provider is described by kind, base URL and models only,
so an import asks the owner to reconnect a key (or binds a matching one of the App's).
Imports are untrusted input: every limit below is checked before anything is written.
"""

from __future__ import annotations

import io
import json
import re
import stat
import struct
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlmodel import Session, col, select

from mosoo_core.agents._catalog import BUILTIN_TOOLS, RUNTIMES, TOOL_POLICIES
from mosoo_core.agents.changes import AgentChanges
from mosoo_core.agents.service import create_agent, update_agent
from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput
from mosoo_core.identity import get_app
from mosoo_core.logs import get_logger
from mosoo_core.ownership import owned_agent
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.vault import ProviderCredential
from mosoo_core.vault.types import PROVIDER_PRESETS, ProviderKind

FORMAT = "mosoo.agent"
VERSION = 1
MANIFEST = "manifest.json"

MAX_PACKAGE_BYTES = 64 * 1024 * 1024  # the zip as uploaded
MAX_UNPACKED_BYTES = 64 * 1024 * 1024  # all entries, decompressed
MAX_ENTRY_BYTES = 16 * 1024 * 1024
MAX_ENTRIES = 512
MAX_DIRECTORY_BYTES = (
    2 * 1024 * 1024
)  # the zip's central directory, parsed before any limit applies
MAX_MANIFEST_BYTES = 2 * 1024 * 1024
MAX_PATH_CHARS = 255
MAX_PROVIDER_OPTIONS_BYTES = 16 * 1024
MAX_LISTED = 100  # skills, MCP servers, provider models
_READ_CHUNK = 64 * 1024
# A fixed timestamp inside the zip, so the same Agent exported at the same time is the same bytes.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)

_AGENT_FIELDS = (
    "name",
    "description",
    "runtime",
    "kind",
    "model",
    "system_prompt",
    "tools",
    "provider_options",
)
_MANIFEST_FIELDS = {
    "format",
    "version",
    "exported_at",
    "agent",
    "provider",
    "skills",
    "mcp_servers",
    "environment",
}
_SECRET_NAMES = {
    ".env",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    ".netrc",
    ".pgpass",
    "credentials.json",
}
_SECRET_SUFFIXES = (".env", ".pem", ".key", ".p12", ".pfx")
_SECRET_DIRS = {"secrets", ".secrets", ".ssh"}
# Option names that carry a secret; compared with case, "-" and "_" ignored.
_SECRET_OPTION_KEYS = {
    "apikey",
    "key",
    "secret",
    "clientsecret",
    "token",
    "accesstoken",
    "authtoken",
    "bearertoken",
    "password",
    "authorization",
    "credential",
    "credentials",
}
_DRIVE = re.compile(r"^[A-Za-z]:")

_EOCD = struct.Struct("<4s4H2LH")
_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"

log = get_logger("mosoo.agents")


@dataclass(frozen=True)
class ImportReport:
    """The new draft Agent and what its owner must do before it runs.

    `reconnect` lists what the package could not carry (a provider key, ...); `notes`
    says what the import did on its own (e.g. bound a matching provider key)."""

    agent_id: str
    reconnect: list[str]
    notes: list[str] = field(default_factory=list)


# --- export -----------------------------------------------------------------------------


def export_agent(
    db: Session, account_id: str, app_id: str, agent_id: str, *, now: datetime | None = None
) -> bytes:
    """The Agent as a `.agent` zip: its profile and a description of its provider, never a
    key, a credential id or anything from the vault."""
    agent = owned_agent(db, account_id, app_id, agent_id)
    provider: dict[str, Any] | None = None
    if agent.provider_credential_id:
        credential = db.get(ProviderCredential, agent.provider_credential_id)
        if credential is not None and credential.app_id == app_id:
            provider = {
                "provider": credential.provider,
                "base_url": credential.base_url,
                "models": list(credential.models or []),
            }
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": (now or utcnow()).isoformat(),
        "agent": {
            "name": agent.name,
            "description": agent.description,
            "runtime": agent.runtime,
            "kind": agent.kind,
            "model": agent.model,
            "system_prompt": agent.system_prompt,
            "tools": dict(agent.tools or {}),
            "provider_options": _without_secrets(dict(agent.provider_options or {})),
        },
        "provider": provider,
        # The bindings by id: the resources themselves (skill files, MCP credentials) are not
        # carried yet, so an import reports them to reconnect.
        "skills": [{"id": skill_id} for skill_id in agent.skills or []],
        "mcp_servers": [{"id": server_id} for server_id in agent.mcp_servers or []],
        "environment": {"id": agent.environment_id} if agent.environment_id else None,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo(MANIFEST, date_time=_ZIP_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        archive.writestr(info, body)
    log.info("agent.exported", app_id=app_id, agent_id=agent.id)
    return buffer.getvalue()


def _is_secret_option(key: object) -> bool:
    return isinstance(key, str) and re.sub(r"[-_\s]", "", key).lower() in _SECRET_OPTION_KEYS


def _without_secrets(value: Any) -> Any:
    # Provider options are free-form; a key pasted into them must not leave with the package.
    if isinstance(value, dict):
        return {k: _without_secrets(v) for k, v in value.items() if not _is_secret_option(k)}
    if isinstance(value, list):
        return [_without_secrets(item) for item in value]
    return value


# --- import -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Provider:
    kind: ProviderKind
    base_url: str
    models: list[str]


@dataclass(frozen=True)
class _Manifest:
    agent: dict[str, Any]
    provider: _Provider | None
    skills: int
    mcp_servers: int
    has_environment: bool


def import_agent(db: Session, account_id: str, app_id: str, data: bytes) -> ImportReport:
    """A new draft Agent from a `.agent` package, and a report of what needs reconnecting.

    The package is checked whole (zip structure, paths, sizes, manifest) before anything is
    written; a hostile or broken package raises `InvalidInput` and creates nothing. A
    provider key of the App with the package's provider kind and base URL is bound."""
    get_app(db, account_id, app_id)
    manifest = _parse_manifest(_read_manifest(data))
    reconnect: list[str] = []
    notes: list[str] = []
    credential = _matching_credential(db, app_id, manifest.provider) if manifest.provider else None
    if manifest.provider is None:
        reconnect.append("Choose a provider key.")
    elif credential is None:
        label = PROVIDER_PRESETS[manifest.provider.kind].label
        article = "an" if label[0] in "AEIOU" else "a"
        reconnect.append(
            f"Choose a provider key (the package used {article} {label} provider at {manifest.provider.base_url})."
        )
    else:
        notes.append(f"Connected the provider key {credential.name!r} ({credential.base_url}).")
        model = manifest.agent.get("model") or ""
        if model and credential.models and model not in credential.models:
            reconnect.append(
                f"Check the model: {model!r} is not in the models of {credential.name!r}."
            )
    if manifest.skills:
        reconnect.append(
            f"Add the package's {manifest.skills} skill(s) again: importing skills is not supported yet."
        )
    if manifest.mcp_servers:
        reconnect.append(
            f"Add the package's {manifest.mcp_servers} MCP server(s) again: importing MCP servers is not supported yet."
        )
    if manifest.has_environment:
        reconnect.append(
            "Set up the environment again: importing environments is not supported yet."
        )

    profile = manifest.agent
    created = create_agent(
        db,
        account_id,
        app_id,
        name=profile["name"],
        runtime=profile.get("runtime", "openai"),
        kind=profile.get("kind", "cattle"),
    )
    changes = {
        key: profile[key]
        for key in _AGENT_FIELDS
        if key in profile and key not in ("name", "runtime", "kind")
    }
    if credential is not None:
        changes["provider_credential_id"] = credential.id
    try:
        update_agent(db, account_id, app_id, created.id, AgentChanges(**changes))
    except InvalidInput:
        # The checks above mirror the service's; should the service be stricter, leave nothing behind.
        db.delete(db.get(Agent, created.id))
        db.flush()
        raise
    log.info(
        "agent.imported",
        app_id=app_id,
        agent_id=created.id,
        bound_credential=credential is not None,
    )
    return ImportReport(agent_id=created.id, reconnect=reconnect, notes=notes)


def _refuse(message: str) -> InvalidInput:
    return InvalidInput(f"This package cannot be imported: {message}", field="package")


def _check_directory(data: bytes) -> None:
    """Read the zip's end record ourselves, so a package declaring huge numbers of entries
    is refused before `zipfile` builds an object for each of them."""
    at = len(data) - _EOCD.size
    if not (at >= 0 and data[at : at + 4] == _EOCD_SIGNATURE and data[-2:] == b"\0\0"):
        at = data.rfind(_EOCD_SIGNATURE, max(0, len(data) - _EOCD.size - 0xFFFF))
    if at < 0 or len(data) - at < _EOCD.size:
        raise _refuse("it is not a zip archive.")
    _sig, _disk, _cd_disk, entries_here, entries, cd_size, cd_offset, _comment = _EOCD.unpack_from(
        data, at
    )
    if (
        data[max(0, at - 20) : at][:4] == _ZIP64_LOCATOR_SIGNATURE
        or 0xFFFF in (entries_here, entries)
        or 0xFFFFFFFF in (cd_size, cd_offset)
    ):
        # Zip64 is only needed beyond 65,535 entries or 4 GiB, far past a package's limits.
        raise _refuse(f"it has more than {MAX_ENTRIES} files or is too large (zip64).")
    if max(entries_here, entries) > MAX_ENTRIES:
        raise _refuse(
            f"it has {max(entries_here, entries)} files; a package has at most {MAX_ENTRIES}."
        )
    if cd_size > MAX_DIRECTORY_BYTES:
        raise _refuse("its file list is too large.")


def _check_path(info: zipfile.ZipInfo) -> None:
    name = info.orig_filename
    shown = name[:80]
    if not name or "\0" in name or any(not c.isprintable() for c in name):
        raise _refuse(f"the file name {shown!r} is not allowed.")
    if len(name) > MAX_PATH_CHARS:
        raise _refuse(f"the file name {shown!r}… is longer than {MAX_PATH_CHARS} characters.")
    if "\\" in name:
        raise _refuse(f"the path {shown!r} uses backslashes.")
    if name.startswith("/") or _DRIVE.match(name):
        raise _refuse(f"the path {shown!r} is absolute.")
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise _refuse(f"the path {shown!r} leaves the package or is not normalized.")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise _refuse(f"{shown!r} is a symbolic link.")
    base = parts[-1].lower()
    if (
        base in _SECRET_NAMES
        or base.endswith(_SECRET_SUFFIXES)
        or base.startswith(".env.")
        or any(part.lower() in _SECRET_DIRS for part in parts[:-1])
    ):
        raise _refuse(f"{shown!r} looks like a secret; packages never carry secrets.")


def _read_manifest(data: bytes) -> bytes:
    """Check the whole archive and return the manifest's bytes."""
    if not isinstance(data, bytes | bytearray):
        raise _refuse("it is not a zip archive.")
    if len(data) > MAX_PACKAGE_BYTES:
        raise _refuse(f"it is larger than {MAX_PACKAGE_BYTES // (1024 * 1024)} MiB.")
    _check_directory(data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error):
        raise _refuse("it is not a zip archive.") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_ENTRIES:
            raise _refuse(f"it has {len(infos)} files; a package has at most {MAX_ENTRIES}.")
        seen: set[str] = set()
        declared = 0
        for info in infos:
            _check_path(info)
            if info.filename in seen:
                raise _refuse(f"{info.filename[:80]!r} appears twice.")
            seen.add(info.filename)
            if info.flag_bits & 0x1:
                raise _refuse(f"{info.filename[:80]!r} is encrypted.")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise _refuse(f"{info.filename[:80]!r} uses an unsupported compression method.")
            # The declared sizes refuse an honest bomb without inflating a byte of it...
            if info.file_size > MAX_ENTRY_BYTES:
                raise _refuse(
                    f"{info.filename[:80]!r} is larger than {MAX_ENTRY_BYTES // (1024 * 1024)} MiB."
                )
            declared += info.file_size
            if declared > MAX_UNPACKED_BYTES:
                raise _refuse(f"it unpacks to more than {MAX_UNPACKED_BYTES // (1024 * 1024)} MiB.")
        if MANIFEST not in seen:
            raise _refuse(f"it has no {MANIFEST}.")
        manifest = b""
        total = 0
        for info in infos:
            if info.is_dir():
                continue
            # ...and the bytes actually inflated are counted too, in case a header lies.
            entry = 0
            keep = info.filename == MANIFEST
            chunks: list[bytes] = []
            try:
                with archive.open(info) as stream:
                    while chunk := stream.read(_READ_CHUNK):
                        entry += len(chunk)
                        total += len(chunk)
                        if entry > MAX_ENTRY_BYTES:
                            raise _refuse(
                                f"{info.filename[:80]!r} is larger than {MAX_ENTRY_BYTES // (1024 * 1024)} MiB."
                            )
                        if total > MAX_UNPACKED_BYTES:
                            raise _refuse(
                                f"it unpacks to more than {MAX_UNPACKED_BYTES // (1024 * 1024)} MiB."
                            )
                        if keep:
                            if entry > MAX_MANIFEST_BYTES:
                                raise _refuse(
                                    f"{MANIFEST} is larger than {MAX_MANIFEST_BYTES // (1024 * 1024)} MiB."
                                )
                            chunks.append(chunk)
            except (
                zipfile.BadZipFile,
                ValueError,
                OSError,
                EOFError,
                NotImplementedError,
                RuntimeError,
                struct.error,
            ):
                raise _refuse(f"{info.filename[:80]!r} is damaged.") from None
            if keep:
                manifest = b"".join(chunks)
        return manifest


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_manifest(raw: bytes) -> _Manifest:
    try:
        manifest = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_json_object, parse_constant=_no_constant
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _refuse(f"{MANIFEST} is not valid JSON.") from None
    if not isinstance(manifest, dict):
        raise _refuse(f"{MANIFEST} is not a JSON object.")
    if manifest.get("format") != FORMAT:
        raise _refuse(f"it is not a Mosoo agent package (format must be {FORMAT!r}).")
    version = manifest.get("version")
    if type(version) is not int or version != VERSION:
        raise _refuse(
            f"package version {json.dumps(version)[:20]} is not supported (this Mosoo reads version {VERSION})."
        )
    unknown = set(manifest) - _MANIFEST_FIELDS
    if unknown:
        raise _refuse(f"unknown manifest fields: {', '.join(sorted(unknown))[:200]}.")
    if "exported_at" in manifest and not isinstance(manifest["exported_at"], str | None):
        raise _refuse("exported_at must be a string.")
    return _Manifest(
        agent=_parse_agent(manifest.get("agent")),
        provider=_parse_provider(manifest.get("provider")),
        skills=_count_list(manifest, "skills"),
        mcp_servers=_count_list(manifest, "mcp_servers"),
        has_environment=_parse_environment(manifest.get("environment")),
    )


def _text(agent: dict[str, Any], key: str, limit: int) -> None:
    if key in agent:
        if not isinstance(agent[key], str):
            raise _refuse(f"agent.{key} must be a string.")
        if len(agent[key]) > limit:
            raise _refuse(f"agent.{key} is longer than {limit:,} characters.")


def _parse_agent(agent: object) -> dict[str, Any]:
    # The limits mirror update_agent's, which checks them again when the draft is written.
    if not isinstance(agent, dict):
        raise _refuse("the manifest has no agent.")
    unknown = set(agent) - set(_AGENT_FIELDS)
    if unknown:
        raise _refuse(f"unknown agent fields: {', '.join(sorted(unknown))[:200]}.")
    if not isinstance(agent.get("name"), str) or not agent["name"].strip():
        raise _refuse("the agent has no name.")
    for key, limit in (
        ("name", 80),
        ("description", 500),
        ("runtime", 32),
        ("kind", 16),
        ("model", 200),
        ("system_prompt", 100_000),
    ):
        _text(agent, key, limit)
    if len(" ".join(agent["name"].split())) > 80:
        raise _refuse("agent.name is longer than 80 characters.")
    if "runtime" in agent and agent["runtime"] not in RUNTIMES:
        raise _refuse(f"unknown runtime {agent['runtime']!r}.")
    if "kind" in agent and agent["kind"] not in ("pet", "cattle"):
        raise _refuse(f"unknown kind {agent['kind']!r} (pet or cattle).")
    tools = agent.get("tools", {})
    if not isinstance(tools, dict):
        raise _refuse("agent.tools must be an object.")
    for name, policy in tools.items():
        if name not in BUILTIN_TOOLS:
            raise _refuse(f"unknown tool {name[:40]!r}.")
        if policy not in TOOL_POLICIES:
            raise _refuse(f"the {name} tool's policy must be allow or ask.")
    options = agent.get("provider_options", {})
    if not isinstance(options, dict):
        raise _refuse("agent.provider_options must be an object.")
    if len(json.dumps(options)) > MAX_PROVIDER_OPTIONS_BYTES:
        raise _refuse(
            f"agent.provider_options is larger than {MAX_PROVIDER_OPTIONS_BYTES // 1024} KiB."
        )
    if _without_secrets(options) != options:
        raise _refuse("agent.provider_options holds a key or token; packages never carry secrets.")
    return dict(agent)


def _parse_provider(provider: object) -> _Provider | None:
    if provider is None:
        return None
    if not isinstance(provider, dict):
        raise _refuse("provider must be an object or null.")
    unknown = set(provider) - {"provider", "base_url", "models"}
    if unknown:
        raise _refuse(f"unknown provider fields: {', '.join(sorted(unknown))[:200]}.")
    try:
        kind = ProviderKind(str(provider.get("provider")))
    except ValueError:
        raise _refuse(f"unknown provider {str(provider.get('provider'))[:40]!r}.") from None
    base_url = provider.get("base_url")
    if not isinstance(base_url, str) or len(base_url) > 500:
        raise _refuse("provider.base_url must be a URL of at most 500 characters.")
    try:
        parts = urlsplit(base_url)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        raise _refuse("provider.base_url must be an http:// or https:// URL.") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() or not c.isprintable() for c in base_url)
    ):
        raise _refuse("provider.base_url must be an http:// or https:// URL.")
    if parts.username is not None or parts.password is not None:
        raise _refuse("provider.base_url holds credentials; packages never carry secrets.")
    models = provider.get("models", [])
    if (
        not isinstance(models, list)
        or len(models) > MAX_LISTED
        or not all(isinstance(m, str) and 0 < len(m) <= 200 for m in models)
    ):
        raise _refuse(f"provider.models must be at most {MAX_LISTED} model names.")
    return _Provider(kind=kind, base_url=base_url.rstrip("/"), models=list(models))


def _count_list(manifest: dict[str, Any], key: str) -> int:
    items = manifest.get(key, [])
    if not isinstance(items, list):
        raise _refuse(f"{key} must be a list.")
    if len(items) > MAX_LISTED:
        raise _refuse(f"{key} lists more than {MAX_LISTED} items.")
    if not all(isinstance(item, dict) for item in items):
        raise _refuse(f"every item of {key} must be an object.")
    return len(items)


def _parse_environment(environment: object) -> bool:
    if environment is not None and not isinstance(environment, dict):
        raise _refuse("environment must be an object or null.")
    return bool(environment)


def _matching_credential(
    db: Session, app_id: str, provider: _Provider
) -> ProviderCredential | None:
    """The App's key for the same provider kind and base URL: the default one first, then the oldest."""
    rows = db.exec(
        select(ProviderCredential)
        .where(
            ProviderCredential.app_id == app_id, ProviderCredential.provider == provider.kind.value
        )
        .order_by(
            col(ProviderCredential.is_default).desc(),
            col(ProviderCredential.created_at),
            col(ProviderCredential.id),
        )
    ).all()
    return next((row for row in rows if row.base_url.rstrip("/") == provider.base_url), None)
