"""Request and response shapes of skills."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import Path
from pydantic import BaseModel, Field

from mosoo_core import skills
from mosoo_web.api.v1.schemas import NO_NUL

SkillId = Annotated[str, Path(pattern=NO_NUL, description="A skill id (see `GET /skills`).")]
# `<skill id>` follows the latest version; `<skill id>@<version>` pins one.
SkillBindingText = Annotated[
    str,
    Field(
        pattern=skills.BINDING_PATTERN,
        description="`<skill id>` (the latest version, whichever it is when a run starts) or "
        "`<skill id>@<version>` (that version, always).",
    ),
]


class SkillFile(BaseModel):
    path: str = Field(description="Relative to the skill's folder, `/opt/mosoo/skills/<name>/`.")
    size: int
    executable: bool


class SkillVersion(BaseModel):
    id: str
    number: int
    kind: Literal["md", "zip"] = Field(
        description="What was uploaded: `md` (a lone SKILL.md) or `zip`; the download answers "
        "the same."
    )
    description: str
    license: str
    compatibility: str
    metadata: dict[str, str]
    allowed_tools: str = Field(description="The front matter's `allowed-tools`, as written.")
    skill_md: str = Field(description="SKILL.md, front matter included.")
    files: list[SkillFile]
    size: int = Field(description="Of all files, unpacked.")
    sha256: str = Field(description="Over the files: equal content, equal hash.")
    created_at: datetime

    @classmethod
    def of(cls, view: skills.SkillVersionView) -> SkillVersion:
        return cls(
            id=view.id,
            number=view.number,
            kind="md" if view.kind == "md" else "zip",
            description=view.description,
            license=view.license,
            compatibility=view.compatibility,
            metadata=view.metadata,
            allowed_tools=view.allowed_tools,
            skill_md=view.skill_md,
            files=[
                SkillFile(path=f.path, size=f.size, executable=f.executable) for f in view.files
            ],
            size=view.size,
            sha256=view.content_sha256,
            created_at=view.created_at,
        )


class SkillUser(BaseModel):
    agent_id: str
    agent_name: str
    version: int | None = Field(description="The pinned version; null follows the latest.")
    published_version: int | None = Field(
        description="Set when it is the agent's published version that binds the skill "
        "(not its draft)."
    )


class Skill(BaseModel):
    id: str
    app_id: str
    name: str = Field(description="Its folder in the sandbox: `/opt/mosoo/skills/<name>/`.")
    description: str = Field(description="The latest version's.")
    latest_version: int
    latest: SkillVersion
    used_by: list[SkillUser] = Field(description="The agents that bind it.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: skills.SkillView) -> Skill:
        return cls(
            id=view.id,
            app_id=view.app_id,
            name=view.name,
            description=view.description,
            latest_version=view.latest_version,
            latest=SkillVersion.of(view.latest),
            used_by=[
                SkillUser(
                    agent_id=use.agent_id,
                    agent_name=use.agent_name,
                    version=use.version,
                    published_version=use.published_version,
                )
                for use in view.used_by
            ],
            created_at=view.created_at,
            updated_at=view.updated_at,
        )


class SkillList(BaseModel):
    skills: list[Skill]


class SkillVersionList(BaseModel):
    versions: list[SkillVersion] = Field(description="Newest first.")


class SkillUploaded(BaseModel):
    skill: Skill
    version: SkillVersion = Field(description="The version the upload is.")
    new_skill: bool = Field(description="The upload's name was new in the App.")
    new_version: bool = Field(
        description="False when the content equals the latest version's (no version is made)."
    )

    @classmethod
    def of(cls, upload: skills.SkillUpload) -> SkillUploaded:
        return cls(
            skill=Skill.of(upload.skill),
            version=SkillVersion.of(upload.version),
            new_skill=upload.new_skill,
            new_version=upload.new_version,
        )
