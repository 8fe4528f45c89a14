"""Skills of an App and their immutable, numbered versions.

An upload is parsed and checked whole (`skills.format`) before anything is stored; its
name picks the skill: a new name is a new skill, a name the App has is that skill's next
version (unless the content equals the latest's: then nothing is made). An Agent binds
`<skill_id>` (the latest version, whatever it is when a run starts) or `<skill_id>@<n>`
(version n, always). Uninstalling only marks a skill deleted: its versions stay, bindings to
it are missing (runs go without it, readiness warns).
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, cast

from sqlmodel import Session, col, func, select

from mosoo_core.clock import utcnow
from mosoo_core.db import insert_unless_raced
from mosoo_core.errors import FieldConflict, InvalidInput, NotFound
from mosoo_core.files import get_store, iter_chunks
from mosoo_core.logs import get_logger
from mosoo_core.ownership import owned_app
from mosoo_core.skills.format import (
    SKILL_FILE,
    ParsedSkill,
    SkillKind,
    check_name,
    parse_upload,
    read_archive,
    renamed,
)
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.skills import Skill, SkillVersion

log = get_logger("mosoo.skills")

MAX_BINDINGS = 32  # skills per Agent (as agents.MAX_BINDINGS)
BINDING_PATTERN = r"^[0-9A-Za-z]{1,26}(@[1-9][0-9]{0,8})?$"
_BINDING = re.compile(BINDING_PATTERN)


# --- views -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillFileView:
    path: str
    size: int
    executable: bool


@dataclass(frozen=True)
class SkillVersionView:
    id: str
    skill_id: str
    number: int
    kind: str  # md | zip: what was uploaded, and what a download answers
    description: str
    license: str
    compatibility: str
    metadata: dict[str, str]
    allowed_tools: str
    skill_md: str
    files: list[SkillFileView]
    size: int
    content_sha256: str
    created_at: datetime


@dataclass(frozen=True)
class SkillUse:
    """An Agent that binds the skill: its draft, or the version it has published."""

    agent_id: str
    agent_name: str
    version: int | None  # the pinned version; None follows the latest
    published_version: int | None = None  # set when the binding is the published version's


@dataclass(frozen=True)
class SkillView:
    id: str
    app_id: str
    name: str
    description: str  # the latest version's
    latest_version: int
    latest: SkillVersionView
    used_by: list[SkillUse]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class SkillUpload:
    skill: SkillView
    version: SkillVersionView
    new_skill: bool
    new_version: bool  # False when the content equals the latest version's


@dataclass(frozen=True)
class SkillContent:
    """A version as a download: the zip, or the lone SKILL.md of a `.md` upload."""

    filename: str
    media_type: str
    size: int
    chunks: Iterator[bytes] = field(repr=False)


@dataclass(frozen=True)
class BoundSkill:
    """A binding that resolves to a version the App has: what a run mounts and lists."""

    binding: str
    skill_id: str
    name: str
    description: str
    version: int
    version_id: str
    pinned: bool
    kind: str
    object_key: str
    content_sha256: str


def version_view(row: SkillVersion) -> SkillVersionView:
    return SkillVersionView(
        id=row.id,
        skill_id=row.skill_id,
        number=row.number,
        kind=row.kind,
        description=row.description,
        license=row.license,
        compatibility=row.compatibility,
        metadata=dict(row.skill_metadata or {}),
        allowed_tools=row.allowed_tools,
        skill_md=row.skill_md,
        files=[
            SkillFileView(str(f["path"]), int(f["size"]), bool(f.get("executable")))
            for f in row.files or []
        ],
        size=row.size,
        content_sha256=row.content_sha256,
        created_at=row.created_at,
    )


def _version_row(db: Session, skill_id: str, number: int) -> SkillVersion | None:
    return db.exec(
        select(SkillVersion).where(SkillVersion.skill_id == skill_id, SkillVersion.number == number)
    ).first()


def _latest_row(db: Session, skill: Skill) -> SkillVersion:
    row = _version_row(db, skill.id, skill.latest_version)
    assert row is not None, "a skill always has its latest version"
    return row


def _uses(db: Session, skill: Skill) -> list[SkillUse]:
    uses: list[SkillUse] = []
    rows = db.exec(
        select(Agent).where(Agent.app_id == skill.app_id).order_by(func.lower(Agent.name))
    ).all()
    published = {
        (row.agent_id, row.number): row
        for row in db.exec(
            select(AgentVersion)
            .join(Agent, col(Agent.id) == col(AgentVersion.agent_id))
            .where(
                Agent.app_id == skill.app_id,
                col(Agent.published_version) == col(AgentVersion.number),
            )
        ).all()
    }
    for agent in rows:
        for binding in agent.skills or []:
            skill_id, number = parse_binding(binding)
            if skill_id == skill.id:
                uses.append(SkillUse(agent.id, agent.name, number))
        version = published.get((agent.id, agent.published_version or 0))
        if version is None:
            continue
        for binding in (version.profile or {}).get("skills", []):
            skill_id, number = parse_binding(str(binding))
            if skill_id == skill.id and SkillUse(agent.id, agent.name, number) not in uses:
                uses.append(SkillUse(agent.id, agent.name, number, version.number))
    return uses


def _view(db: Session, skill: Skill) -> SkillView:
    latest = version_view(_latest_row(db, skill))
    return SkillView(
        id=skill.id,
        app_id=skill.app_id,
        name=skill.name,
        description=latest.description,
        latest_version=skill.latest_version,
        latest=latest,
        used_by=_uses(db, skill),
        created_at=skill.created_at,
        updated_at=skill.updated_at,
    )


# --- lookups -----------------------------------------------------------------------------


def _owned(db: Session, account_id: str, app_id: str, skill_id: str) -> Skill:
    owned_app(db, account_id, app_id)
    row = db.get(Skill, skill_id) if skill_id else None
    if row is None or row.app_id != app_id or row.deleted_at is not None:
        raise NotFound("Skill not found.")
    return row


def _live_named(db: Session, app_id: str, name: str) -> Skill | None:
    return db.exec(
        select(Skill).where(
            Skill.app_id == app_id, Skill.name == name, col(Skill.deleted_at).is_(None)
        )
    ).first()


def skill_app_id(db: Session, account_id: str, skill_id: str) -> str:
    """The App of one of the account's skills (for callers that hold only its id, like the
    public API); NotFound for another owner's, an uninstalled one, or none."""
    row = db.get(Skill, skill_id) if skill_id else None
    if row is None or row.deleted_at is not None:
        raise NotFound("Skill not found.")
    try:
        owned_app(db, account_id, row.app_id)
    except NotFound:
        raise NotFound("Skill not found.") from None
    return row.app_id


def list_skills(db: Session, account_id: str, app_id: str) -> list[SkillView]:
    """The App's skills by name, each with its latest version and the Agents using it."""
    owned_app(db, account_id, app_id)
    rows = db.exec(
        select(Skill)
        .where(Skill.app_id == app_id, col(Skill.deleted_at).is_(None))
        .order_by(col(Skill.name))
    ).all()
    return [_view(db, row) for row in rows]


def get_skill(db: Session, account_id: str, app_id: str, skill_id: str) -> SkillView:
    return _view(db, _owned(db, account_id, app_id, skill_id))


def list_skill_versions(
    db: Session, account_id: str, app_id: str, skill_id: str
) -> list[SkillVersionView]:
    """Newest first."""
    skill = _owned(db, account_id, app_id, skill_id)
    rows = db.exec(
        select(SkillVersion)
        .where(SkillVersion.skill_id == skill.id)
        .order_by(col(SkillVersion.number).desc())
    ).all()
    return [version_view(row) for row in rows]


def _version_of(db: Session, skill: Skill, number: int | None) -> SkillVersion:
    if number is None:
        return _latest_row(db, skill)
    row = _version_row(db, skill.id, number) if number > 0 else None
    if row is None:
        raise NotFound(f"Skill {skill.name} has no version {number}.")
    return row


def get_skill_version(
    db: Session, account_id: str, app_id: str, skill_id: str, number: int | None = None
) -> SkillVersionView:
    """One version (the latest when `number` is None)."""
    return version_view(_version_of(db, _owned(db, account_id, app_id, skill_id), number))


# --- storing -----------------------------------------------------------------------------


def object_key(app_id: str, skill_id: str, version_id: str) -> str:
    return f"{app_id}/skills/{skill_id}/{version_id}.zip"


def _new_skill(db: Session, app_id: str, name: str) -> tuple[Skill, bool]:
    """The App's live skill of that name, made if there is none (True when made)."""
    skill = _live_named(db, app_id, name)
    if skill is not None:
        return skill, False
    made = Skill(app_id=app_id, name=name)
    # Another upload may make it at once: then that skill is this one.
    skill = insert_unless_raced(db, made, lambda: _live_named(db, app_id, name))
    return skill, skill is made


def _add_version(db: Session, skill: Skill, parsed: ParsedSkill) -> SkillVersion:
    """The skill's next version, its files stored first (a failed store leaves no row)."""
    # Lock the row (PostgreSQL) so two concurrent uploads cannot take the same number.
    locked = db.get(Skill, skill.id, with_for_update=True)
    assert locked is not None
    latest = db.exec(
        select(func.max(SkillVersion.number)).where(SkillVersion.skill_id == locked.id)
    ).one()
    row = SkillVersion(
        skill_id=locked.id,
        app_id=locked.app_id,
        number=(latest or 0) + 1,
        kind=parsed.kind,
        description=parsed.front_matter.description,
        license=parsed.front_matter.license,
        compatibility=parsed.front_matter.compatibility,
        skill_metadata=dict(parsed.front_matter.metadata or {}),
        allowed_tools=parsed.front_matter.allowed_tools,
        skill_md=parsed.skill_md,
        files=[
            {"path": f.path, "size": len(f.data), "executable": f.executable} for f in parsed.files
        ],
        size=parsed.size,
        content_sha256=parsed.content_sha256,
        object_key="",
    )
    row.object_key = object_key(locked.app_id, locked.id, row.id)
    archive = parsed.archive()
    get_store().put(row.object_key, io.BytesIO(archive))
    row.archive_size = len(archive)
    locked.latest_version = row.number
    locked.updated_at = utcnow()
    db.add_all([row, locked])
    db.flush()
    log.info(
        "skill.version_added",
        app_id=locked.app_id,
        skill_id=locked.id,
        version=row.number,
        files=len(parsed.files),
        size=parsed.size,
    )
    return row


def save_skill(db: Session, app_id: str, parsed: ParsedSkill) -> SkillUpload:
    """Store a checked skill in the App: a new skill, or the next version of the live skill
    with its name (none when the content equals its latest version's)."""
    skill, made = _new_skill(db, app_id, parsed.name)
    if not made:
        latest = _latest_row(db, skill)
        if latest.content_sha256 == parsed.content_sha256:
            return SkillUpload(_view(db, skill), version_view(latest), False, False)
    row = _add_version(db, skill, parsed)
    return SkillUpload(_view(db, skill), version_view(row), made, True)


def upload_skill(
    db: Session, account_id: str, app_id: str, data: bytes, filename: str
) -> SkillUpload:
    """Add a skill from an uploaded `.md` (it becomes SKILL.md) or `.zip` (SKILL.md at its
    root or in one top folder). Checked whole first (the front matter as the Agent Skills
    format says, the zip as `.agent` packages are); a refusal is InvalidInput naming the
    field (`file`, `front_matter`, `name`, `description`, ...) and stores nothing. A name
    the App has makes that skill's next version."""
    owned_app(db, account_id, app_id)
    return save_skill(db, app_id, parse_upload(data, filename))


def upload_skill_version(
    db: Session, account_id: str, app_id: str, skill_id: str, data: bytes, filename: str
) -> SkillUpload:
    """The next version of one skill (as `upload_skill`), refused (`name`) when the upload's
    front matter names another skill: it would add to, or make, that one instead."""
    skill = _owned(db, account_id, app_id, skill_id)
    parsed = parse_upload(data, filename)
    if parsed.name != skill.name:
        raise InvalidInput(
            f"SKILL.md front matter: name is {parsed.name}; a new version of {skill.name} "
            f"must keep name: {skill.name}.",
            field="name",
        )
    return save_skill(db, app_id, parsed)


def load_version(key: str, kind: str) -> ParsedSkill:
    """A stored version's files, read back from the object store."""
    with contextlib.closing(get_store().open(key)) as handle:
        data = handle.read()
    return read_archive(data, cast(SkillKind, kind))


def fork_skill(
    db: Session,
    account_id: str,
    app_id: str,
    skill_id: str,
    name: str,
    *,
    version: int | None = None,
) -> SkillView:
    """A new skill named `name` whose first version is a copy of one of the skill's versions
    (the latest by default), SKILL.md's name changed to match."""
    source = _owned(db, account_id, app_id, skill_id)
    name = check_name(name)
    if _live_named(db, app_id, name) is not None:
        raise FieldConflict(
            f"A skill named {name} already exists.", field="name", code="name_taken"
        )
    row = _version_of(db, source, version)
    parsed = renamed(load_version(row.object_key, row.kind), name)
    skill, _made = _new_skill(db, app_id, name)
    _add_version(db, skill, parsed)
    log.info("skill.forked", app_id=app_id, skill_id=skill.id, source_id=source.id)
    return _view(db, skill)


def uninstall_skill(db: Session, account_id: str, app_id: str, skill_id: str) -> None:
    """Mark the skill deleted: gone from lists and new runs; its versions stay. Agents that
    still bind it show it missing and run without it."""
    skill = _owned(db, account_id, app_id, skill_id)
    skill.deleted_at = utcnow()
    db.add(skill)
    db.flush()
    log.info("skill.uninstalled", app_id=app_id, skill_id=skill.id)


def open_skill_content(
    db: Session, account_id: str, app_id: str, skill_id: str, number: int | None = None
) -> SkillContent:
    """A version as it downloads: SKILL.md for a `.md` upload, the zip of its files
    otherwise (the latest version when `number` is None)."""
    skill = _owned(db, account_id, app_id, skill_id)
    row = _version_of(db, skill, number)
    if row.kind == "md":
        data = row.skill_md.encode("utf-8")
        return SkillContent(SKILL_FILE, "text/markdown; charset=utf-8", len(data), iter([data]))
    store = get_store()
    handle: IO[bytes] = store.open(row.object_key)
    return SkillContent(
        f"{skill.name}-v{row.number}.zip", "application/zip", row.archive_size, iter_chunks(handle)
    )


# --- bindings ----------------------------------------------------------------------------


def parse_binding(value: str) -> tuple[str, int | None]:
    """("<skill_id>", None) for a binding that follows the latest version, ("<skill_id>", n)
    for one pinned to version n."""
    skill_id, _, number = value.partition("@")
    return skill_id, int(number) if number.isdigit() else None


def clean_skill_bindings(values: Any, field_name: str = "skills") -> list[str]:
    """Skill bindings, `<skill_id>` or `<skill_id>@<version>`: each skill bound once (its
    first binding kept, later ones of the same skill dropped), at most MAX_BINDINGS."""
    if values is None:
        return []
    if not isinstance(values, list | tuple):
        raise InvalidInput("Skills must be a list of skill ids.", field=field_name)
    cleaned: list[str] = []
    seen: set[str] = set()
    for value in values:
        if not isinstance(value, str) or not _BINDING.match(value):
            raise InvalidInput(
                "Skills are bound as <skill id> (the latest version) or <skill id>@<version>.",
                field=field_name,
            )
        skill_id, _ = parse_binding(value)
        if skill_id in seen:
            continue
        seen.add(skill_id)
        cleaned.append(value)
    if len(cleaned) > MAX_BINDINGS:
        raise InvalidInput(f"An agent binds at most {MAX_BINDINGS} skills.", field=field_name)
    return cleaned


def bound_skills(db: Session, app_id: str, bindings: Sequence[str]) -> list[BoundSkill]:
    """The bindings that resolve to a live skill of the App (and, pinned, to a version it
    has), in binding order; the others are missing."""
    found: list[BoundSkill] = []
    for binding in bindings:
        skill_id, number = parse_binding(binding)
        skill = db.get(Skill, skill_id) if skill_id else None
        if skill is None or skill.app_id != app_id or skill.deleted_at is not None:
            continue
        row = _version_row(db, skill.id, number if number is not None else skill.latest_version)
        if row is None:
            continue
        found.append(_bound(binding, skill, row, pinned=number is not None))
    return found


def bound_versions(db: Session, app_id: str, version_ids: Sequence[str]) -> list[BoundSkill]:
    """These versions of the App's skills as a run lists and mounts them, in the order
    given (a Pet sandbox keeps the versions it was made with until Apply). Versions of an
    uninstalled skill are kept: the sandbox still mounts them. Unknown ids are left out."""
    if not version_ids:
        return []
    rows = {
        row.id: (row, skill)
        for row, skill in db.exec(
            select(SkillVersion, Skill)
            .join(Skill, col(Skill.id) == col(SkillVersion.skill_id))
            .where(col(SkillVersion.id).in_(list(version_ids)), SkillVersion.app_id == app_id)
        ).all()
    }
    return [
        _bound(f"{skill.id}@{row.number}", skill, row, pinned=True)
        for row, skill in (rows[version_id] for version_id in version_ids if version_id in rows)
    ]


def _bound(binding: str, skill: Skill, row: SkillVersion, *, pinned: bool) -> BoundSkill:
    return BoundSkill(
        binding=binding,
        skill_id=skill.id,
        name=skill.name,
        description=row.description,
        version=row.number,
        version_id=row.id,
        pinned=pinned,
        kind=row.kind,
        object_key=row.object_key,
        content_sha256=row.content_sha256,
    )


def missing_skill_names(db: Session, app_id: str, bindings: Sequence[str]) -> dict[str, str]:
    """For bindings that do not resolve, what to call them: "<name>" or "<name> version n"
    when the skill (an uninstalled one too) is known, else the binding itself."""
    found = {bound.binding for bound in bound_skills(db, app_id, bindings)}
    names: dict[str, str] = {}
    for binding in bindings:
        if binding in found:
            continue
        skill_id, number = parse_binding(binding)
        skill = db.get(Skill, skill_id) if skill_id else None
        label = skill.name if skill is not None and skill.app_id == app_id else binding
        names[binding] = (
            f"{label} version {number}" if number is not None and label != binding else label
        )
    return names


@dataclass(frozen=True)
class ImportedSkill:
    binding: str
    name: str
    version: int
    outcome: str  # "created" (a new skill), "new_version", or "reused" (same content)


def import_skill(db: Session, app_id: str, parsed: ParsedSkill, *, pinned: bool) -> ImportedSkill:
    """Bring a skill that travelled in an `.agent` package into the App, and the binding
    for it. A skill of the same name is reused when its latest version (or, for a pinned
    binding, any version) has the same content; otherwise it gets a new version."""
    skill = _live_named(db, app_id, parsed.name)
    if skill is not None:
        latest = _latest_row(db, skill)
        same = latest if latest.content_sha256 == parsed.content_sha256 else None
        if same is None and pinned:
            same = db.exec(
                select(SkillVersion)
                .where(
                    SkillVersion.skill_id == skill.id,
                    SkillVersion.content_sha256 == parsed.content_sha256,
                )
                .order_by(col(SkillVersion.number).desc())
            ).first()
        if same is not None:
            binding = f"{skill.id}@{same.number}" if pinned else skill.id
            return ImportedSkill(binding, skill.name, same.number, "reused")
    upload = save_skill(db, app_id, parsed)
    number = upload.version.number
    return ImportedSkill(
        f"{upload.skill.id}@{number}" if pinned else upload.skill.id,
        upload.skill.name,
        number,
        "created" if upload.new_skill else "new_version",
    )
