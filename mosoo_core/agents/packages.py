"""`.agent` packages: export an Agent's profile as a zip, import one as a new draft.

A package never holds a secret: the provider is described by kind, base URL and models only,
so an import asks the owner to reconnect a key (or binds a matching one of the App's).
Skills travel with their content: the bound version's files under `skills/<name>/`, recreated
in the App an import goes to. Imports are untrusted input: the archive is checked whole
(`mosoo_core.archives`, the checker skill uploads use too), then the manifest and every
skill, before anything is written.
"""

from __future__ import annotations

import io
import json
import re
import stat
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlmodel import Session, col, select

from mosoo_core import skills
from mosoo_core.agents._catalog import BUILTIN_TOOLS, RUNTIMES, TOOL_POLICIES
from mosoo_core.agents.changes import AgentChanges
from mosoo_core.agents.service import create_agent, update_agent
from mosoo_core.archives import CheckedZip, ZipEntry, ZipLimits, read_checked_zip
from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput
from mosoo_core.identity import get_app
from mosoo_core.logs import get_logger
from mosoo_core.mcp import clean_server_policy, server_policy
from mosoo_core.ownership import owned_agent
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.mcp import McpServer
from mosoo_core.tables.vault import ProviderCredential
from mosoo_core.vault.types import PROVIDER_PRESETS, ProviderKind

FORMAT = "mosoo.agent"
VERSION = 1
MANIFEST = "manifest.json"

MAX_PACKAGE_BYTES = 64 * 1024 * 1024  # the zip as uploaded
MAX_UNPACKED_BYTES = 64 * 1024 * 1024  # all entries, decompressed
MAX_ENTRY_BYTES = 16 * 1024 * 1024
MAX_ENTRIES = 512
MAX_MANIFEST_BYTES = 2 * 1024 * 1024
MAX_PATH_CHARS = 255
PACKAGE_LIMITS = ZipLimits(
    max_bytes=MAX_PACKAGE_BYTES,
    max_unpacked_bytes=MAX_UNPACKED_BYTES,
    max_entry_bytes=MAX_ENTRY_BYTES,
    max_entries=MAX_ENTRIES,
    max_path_chars=MAX_PATH_CHARS,
)
MAX_PROVIDER_OPTIONS_BYTES = 16 * 1024
MAX_LISTED = 100  # skills, MCP servers, provider models
SKILLS_FOLDER = "skills/"  # a carried skill's files: skills/<name>/...
_SKILL_FIELDS = {"id", "name", "version", "pinned", "kind", "sha256"}
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
    """The Agent as a `.agent` zip: its profile, a description of its provider (never a
    key, a credential id or anything from the vault) and the files of the skill versions it
    binds (a missing skill is left out: runs go without it anyway). InvalidInput (`skills`)
    when those files would not fit in a package."""
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
    carried = _carried_skills(db, app_id, list(agent.skills or []))
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
        # Skills by name with their files (below); MCP servers by id only: their credentials
        # never leave the vault, so an import reports them to reconnect.
        "skills": [
            {
                "name": bound.name,
                "version": bound.version,
                "pinned": bound.pinned,
                "kind": bound.kind,
                "sha256": bound.content_sha256,
            }
            for bound, _parsed in carried
        ],
        "mcp_servers": _mcp_references(db, agent),
        "environment": {"id": agent.environment_id} if agent.environment_id else None,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo(MANIFEST, date_time=_ZIP_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        archive.writestr(info, body)
        for bound, parsed in carried:
            for item in parsed.files:
                info = zipfile.ZipInfo(f"{SKILLS_FOLDER}{bound.name}/{item.path}", _ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3
                mode = 0o755 if item.executable else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                archive.writestr(info, item.data)
    log.info("agent.exported", app_id=app_id, agent_id=agent.id, skills=len(carried))
    return buffer.getvalue()


def _carried_skills(
    db: Session, app_id: str, bindings: list[str]
) -> list[tuple[skills.BoundSkill, skills.ParsedSkill]]:
    """The bound versions that resolve, with their files, checked against the limits an
    import applies (so what is exported can be imported)."""
    carried = [
        (bound, skills.load_version(bound.object_key, bound.kind))
        for bound in skills.bound_skills(db, app_id, bindings)
    ]
    entries = 1 + sum(len(parsed.files) for _, parsed in carried)
    size = sum(parsed.size for _, parsed in carried)
    if entries > MAX_ENTRIES or size > MAX_UNPACKED_BYTES - MAX_MANIFEST_BYTES:
        raise InvalidInput(
            f"The agent's skills are too large to export together: a package holds at most "
            f"{MAX_ENTRIES} files and {MAX_UNPACKED_BYTES // (1024 * 1024)} MiB.",
            field="skills",
        )
    for bound, parsed in carried:
        for item in parsed.files:
            if len(f"{SKILLS_FOLDER}{bound.name}/{item.path}") > MAX_PATH_CHARS:
                raise InvalidInput(
                    f"The skill {bound.name} has a path too long for a package: {item.path[:80]}.",
                    field="skills",
                )
    return carried


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
class _PackagedSkill:
    skill: skills.ParsedSkill
    pinned: bool


@dataclass(frozen=True)
class _Manifest:
    agent: dict[str, Any]
    provider: _Provider | None
    skills: list[_PackagedSkill]
    skills_without_files: int  # bindings of packages that did not carry skills (older ones)
    mcp_servers: int
    has_environment: bool
    # Bound MCP servers by reference (name, URL, auth kind, the Agent's policy), no credential.
    mcp_references: tuple[dict[str, Any], ...] = ()


def import_agent(db: Session, account_id: str, app_id: str, data: bytes) -> ImportReport:
    """A new draft Agent from a `.agent` package, and a report of what needs reconnecting.

    The package is checked whole (zip structure, paths, sizes, manifest, every skill)
    before anything is written; a hostile or broken package raises `InvalidInput` and
    creates nothing. A provider key of the App with the package's provider kind and base URL
    is bound. Each skill is recreated in the App (a skill of the same name there gets a new
    version when the content differs, else it is reused) and bound as it was."""
    get_app(db, account_id, app_id)
    package = _read_package(data)
    manifest = _parse_manifest(package.kept[MANIFEST].data, package)
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
    if manifest.skills_without_files:
        reconnect.append(
            f"Add the package's {manifest.skills_without_files} skill(s) again: the package "
            "does not carry their files."
        )
    mcp_bound, mcp_policies = _match_mcp_servers(db, app_id, manifest, reconnect, notes)
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
    if mcp_bound:
        changes["mcp_servers"], changes["mcp_policies"] = mcp_bound, mcp_policies
    if manifest.skills:
        changes["skills"] = []
        for packaged in manifest.skills:
            imported = skills.import_skill(db, app_id, packaged.skill, pinned=packaged.pinned)
            changes["skills"].append(imported.binding)
            notes.append(_skill_note(imported))
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


def _mcp_references(db: Session, agent: Agent) -> list[dict[str, Any]]:
    """The bound MCP servers by reference: what identifies one in another App (name, URL),
    how it authenticates, and the Agent's policy for it. Never a credential."""
    references: list[dict[str, Any]] = []
    for server_id in agent.mcp_servers or []:
        row = db.get(McpServer, server_id)
        if row is None or row.app_id != agent.app_id:
            references.append({"id": server_id})
            continue
        references.append(
            {
                "id": row.id,
                "name": row.name,
                "url": row.url,
                "auth_kind": row.auth_kind,
                "policy": server_policy(agent.mcp_policies, server_id),
            }
        )
    return references


def _parse_mcp_references(manifest: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    references: list[dict[str, Any]] = []
    for item in manifest.get("mcp_servers") or []:
        name, url = item.get("name"), item.get("url")
        if name is None and url is None:
            continue  # an id only: a server that was already missing when exported
        if (
            not isinstance(name, str)
            or not isinstance(url, str)
            or len(name) > 64
            or len(url) > 2000
        ):
            raise _refuse("each MCP server needs a name and a URL (strings).")
        try:
            policy = clean_server_policy(item.get("policy") or {})
        except InvalidInput as error:
            raise _refuse(f"MCP server {name[:32]!r}: {error.message}") from None
        auth_kind = item.get("auth_kind")
        references.append(
            {"name": name, "url": url, "auth_kind": str(auth_kind)[:16], "policy": policy}
        )
    return tuple(references)


def _match_mcp_servers(
    db: Session, app_id: str, manifest: _Manifest, reconnect: list[str], notes: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """Bind the App's servers with the same name and URL as the package's; the others are
    for the owner to add (their credentials never travel)."""
    bound: list[str] = []
    policies: dict[str, Any] = {}
    for reference in manifest.mcp_references:
        row = db.exec(
            select(McpServer).where(
                McpServer.app_id == app_id,
                McpServer.name == reference["name"],
                McpServer.url == reference["url"],
            )
        ).first()
        if row is None:
            reconnect.append(
                f"Add the MCP server {reference['name']!r} ({reference['url']}, "
                f"{reference['auth_kind']} authentication) and bind it."
            )
            continue
        bound.append(row.id)
        policies[row.id] = reference["policy"]
        notes.append(f"Bound the MCP server {row.name!r} ({row.url}).")
    missing = manifest.mcp_servers - len(manifest.mcp_references)
    if missing > 0:
        reconnect.append(
            f"Add the package's {missing} MCP server(s) again: it names them by id only."
        )
    return bound, policies


def _refuse(message: str) -> InvalidInput:
    return InvalidInput(f"This package cannot be imported: {message}", field="package")


def _check_names(names: list[str]) -> None:
    if MANIFEST not in names:
        raise _refuse(f"it has no {MANIFEST}.")


def _keep(name: str) -> int | None:
    """The manifest, and the files of the skills the package carries."""
    if name == MANIFEST:
        return MAX_MANIFEST_BYTES
    return MAX_ENTRY_BYTES if name.startswith(SKILLS_FOLDER) else None


def _read_package(data: bytes) -> CheckedZip:
    """Check the whole archive; the manifest's and the skills' bytes."""
    return read_checked_zip(data, PACKAGE_LIMITS, _refuse, keep=_keep, check_names=_check_names)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_manifest(raw: bytes, package: CheckedZip) -> _Manifest:
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
        **_parse_skills(manifest, package),
        mcp_servers=_count_list(manifest, "mcp_servers"),
        has_environment=_parse_environment(manifest.get("environment")),
        mcp_references=_parse_mcp_references(manifest),
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


def _parse_skills(manifest: dict[str, Any], package: CheckedZip) -> dict[str, Any]:
    """The skills the package carries, each checked as a skill upload is (its front matter,
    its files), and how many it names without carrying them (packages made before skills
    travelled listed only ids)."""
    _count_list(manifest, "skills")
    carried: list[_PackagedSkill] = []
    without_files = 0
    names: set[str] = set()
    for index, item in enumerate(manifest.get("skills", [])):
        unknown = set(item) - _SKILL_FIELDS
        if unknown:
            raise _refuse(f"unknown fields of skills[{index}]: {', '.join(sorted(unknown))[:200]}.")
        if "name" not in item:
            without_files += 1
            continue
        name = item["name"]
        try:
            skills.check_name(name)
        except InvalidInput:
            raise _refuse(f"skills[{index}].name is not a skill name.") from None
        if name in names:
            raise _refuse(f"the skill {name} is listed twice.")
        names.add(name)
        pinned = item.get("pinned", False)
        kind = item.get("kind", "zip")
        if not isinstance(pinned, bool):
            raise _refuse(f"skills[{index}].pinned must be true or false.")
        if kind not in ("md", "zip"):
            raise _refuse(f"skills[{index}].kind must be md or zip.")
        if "version" in item and type(item["version"]) is not int:
            raise _refuse(f"skills[{index}].version must be a number.")
        if "sha256" in item and not isinstance(item["sha256"], str):
            raise _refuse(f"skills[{index}].sha256 must be a string.")
        prefix = f"{SKILLS_FOLDER}{name}/"
        files: dict[str, ZipEntry] = {
            entry_name[len(prefix) :]: entry
            for entry_name, entry in package.kept.items()
            if entry_name.startswith(prefix) and not entry_name.endswith("/")
        }
        if skills.SKILL_FILE not in files:
            raise _refuse(f"the skill {name} has no {prefix}{skills.SKILL_FILE}.")
        try:
            parsed = skills.parse_files(files, kind)
        except InvalidInput as error:
            reason = error.message.removeprefix("This skill cannot be uploaded: ")
            raise _refuse(f"the skill {name}: {reason}") from None
        if parsed.name != name:
            raise _refuse(f"the skill in {prefix} is named {parsed.name} in its SKILL.md.")
        carried.append(_PackagedSkill(parsed, pinned))
    return {"skills": carried, "skills_without_files": without_files}


def _skill_note(imported: skills.ImportedSkill) -> str:
    if imported.outcome == "created":
        return f"Added the skill {imported.name}."
    if imported.outcome == "new_version":
        return f"Added version {imported.version} of the skill {imported.name}."
    return f"Used the App's skill {imported.name} (version {imported.version}, the same content)."


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
