"""The `mosoo_core.skills` calls the Skills pages make (each in a worker thread,
`asyncio.to_thread`) and the plain rows they hand back to the states.

A version's SKILL.md reaches the page as its front matter's fields and its Markdown body
(the front matter cut off: the page shows those fields on their own)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mosoo_core import skills
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_web.formatting import relative_time, size_text

# What the browser may send (the widget refuses more before uploading; the state checks again).
MAX_UPLOAD_BYTES = skills.SKILL_LIMITS.max_bytes
# The front matter block SKILL.md starts with (as `mosoo_core.skills.format` reads it).
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)


def download_href(skill_id: str, number: int) -> str:
    """The console's download of one version (`mosoo_web.api.skills`, session cookie)."""
    return f"/api/skills/{skill_id}/versions/{number}/content"


def skill_body(skill_md: str) -> str:
    """SKILL.md without its front matter: the Markdown the page renders."""
    return _FRONT_MATTER.sub("", skill_md.lstrip("\ufeff"), count=1).lstrip("\r\n")


def _users_label(uses: Sequence[skills.SkillUse]) -> str:
    names = list(dict.fromkeys(use.agent_name for use in uses))  # an Agent once
    return ", ".join(names)


@dataclass
class SkillRow:
    id: str = ""
    name: str = ""
    description: str = ""
    latest_version: int = 0
    versions: int = 0
    used_by: str = ""  # the Agents' names, "" when none binds it
    used_count: int = 0
    updated: str = ""


@dataclass
class UserRow:
    """An Agent that binds the skill: its draft, or its published version."""

    agent_id: str = ""
    agent_name: str = ""
    binding: str = ""  # "Latest version" or "Version 2"
    published: str = ""  # "Published version 3" when it is the published version's binding


@dataclass
class VersionRow:
    number: int = 0
    kind: str = ""  # md | zip: what was uploaded, and what the download answers
    files: int = 0
    size: str = ""
    created: str = ""
    download_href: str = ""


@dataclass
class MetadataRow:
    key: str = ""
    value: str = ""


@dataclass
class FileRow:
    path: str = ""
    size: str = ""
    executable: bool = False


@dataclass
class ShownVersion:
    """One version as the page shows it: its front matter's fields and SKILL.md's body."""

    number: int = 0
    description: str = ""
    license: str = ""
    compatibility: str = ""
    allowed_tools: str = ""
    metadata: list[MetadataRow] = field(default_factory=list)
    body: str = ""
    files: list[FileRow] = field(default_factory=list)
    created: str = ""


@dataclass(frozen=True)
class SkillDetail:
    id: str
    name: str
    latest_version: int
    users: list[UserRow]
    versions: list[VersionRow]  # newest first
    shown: ShownVersion  # the latest version


@dataclass(frozen=True)
class Uploaded:
    skill_id: str
    name: str
    number: int  # the version the upload is (the latest, unchanged, when `new_version` is false)
    new_skill: bool
    new_version: bool

    @property
    def message(self) -> str:
        if self.new_skill:
            return f"Uploaded {self.name}, version {self.number}."
        if self.new_version:
            return f"Uploaded {self.name} version {self.number}."
        return f"{self.name} is unchanged: version {self.number} has the same content."


def _uploaded(upload: skills.SkillUpload) -> Uploaded:
    return Uploaded(
        skill_id=upload.skill.id,
        name=upload.skill.name,
        number=upload.version.number,
        new_skill=upload.new_skill,
        new_version=upload.new_version,
    )


def shown_version(view: skills.SkillVersionView) -> ShownVersion:
    return ShownVersion(
        number=view.number,
        description=view.description,
        license=view.license,
        compatibility=view.compatibility,
        allowed_tools=view.allowed_tools,
        metadata=[MetadataRow(key, value) for key, value in view.metadata.items()],
        body=skill_body(view.skill_md),
        files=[FileRow(f.path, size_text(f.size), f.executable) for f in view.files],
        created=relative_time(view.created_at, utcnow()),
    )


def list_rows(account_id: str, app_id: str) -> list[SkillRow]:
    with session_scope() as db:
        views = skills.list_skills(db, account_id, app_id)
    now = utcnow()
    return [
        SkillRow(
            id=view.id,
            name=view.name,
            description=view.description,
            latest_version=view.latest_version,
            # Versions are numbered from 1 and never removed: the latest's number counts them.
            versions=view.latest_version,
            used_by=_users_label(view.used_by),
            used_count=len({use.agent_id for use in view.used_by}),
            updated=relative_time(view.updated_at, now),
        )
        for view in views
    ]


def load_detail(account_id: str, app_id: str, skill_id: str) -> SkillDetail:
    with session_scope() as db:
        view = skills.get_skill(db, account_id, app_id, skill_id)
        versions = skills.list_skill_versions(db, account_id, app_id, skill_id)
    now = utcnow()
    return SkillDetail(
        id=view.id,
        name=view.name,
        latest_version=view.latest_version,
        users=[
            UserRow(
                agent_id=use.agent_id,
                agent_name=use.agent_name,
                binding="Latest version" if use.version is None else f"Version {use.version}",
                published=(
                    f"Published version {use.published_version}"
                    if use.published_version is not None
                    else ""
                ),
            )
            for use in view.used_by
        ],
        versions=[
            VersionRow(
                number=version.number,
                kind=version.kind,
                files=len(version.files),
                size=size_text(version.size),
                created=relative_time(version.created_at, now),
                download_href=download_href(view.id, version.number),
            )
            for version in versions
        ],
        shown=shown_version(view.latest),
    )


def load_version(account_id: str, app_id: str, skill_id: str, number: int) -> ShownVersion:
    with session_scope() as db:
        view = skills.get_skill_version(db, account_id, app_id, skill_id, number)
    return shown_version(view)


def upload(account_id: str, app_id: str, data: bytes, filename: str) -> Uploaded:
    """A new skill, or the next version of the App's skill with the upload's name. Refusals
    are the service's `InvalidInput`, naming the field; nothing is stored then."""
    with session_scope() as db:
        return _uploaded(skills.upload_skill(db, account_id, app_id, data, filename))


def upload_version(
    account_id: str, app_id: str, skill_id: str, data: bytes, filename: str
) -> Uploaded:
    """The next version of this skill; refused (`name`) when the upload names another."""
    with session_scope() as db:
        return _uploaded(
            skills.upload_skill_version(db, account_id, app_id, skill_id, data, filename)
        )


def fork(account_id: str, app_id: str, skill_id: str, name: str) -> tuple[str, str]:
    """The copy's id and name: a new skill whose version 1 is the latest version's files."""
    with session_scope() as db:
        view = skills.fork_skill(db, account_id, app_id, skill_id, name.strip())
    return view.id, view.name


def uninstall(account_id: str, app_id: str, skill_id: str) -> None:
    with session_scope() as db:
        skills.uninstall_skill(db, account_id, app_id, skill_id)
