"""Skills: instructions and files an agent reads when a task fits them (Agent Skills format).

A skill is a name in an App with a pointer to its latest version; every upload of new content
is a new, immutable, numbered version. A version's files are one normalized zip in the object
store (`{app_id}/skills/{skill_id}/{version_id}.zip`); the row keeps the parsed front matter
and the SKILL.md text. An uninstalled skill is only marked deleted: its versions stay, and an
Agent that still binds it shows it missing and runs without it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id

SKILL_KINDS = ("md", "zip")  # what was uploaded: a lone SKILL.md, or a zip of files


def _id() -> Any:  # a Field, typed Any so it can stand for the column's value type
    return Field(default_factory=new_id, primary_key=True, max_length=26)


def _now() -> Any:
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Skill(SQLModel, table=True):
    __tablename__ = "skill"
    __table_args__ = (
        # A name is taken once per App among live skills; an uninstalled one frees it.
        sa.Index(
            "uq_skill_live_name",
            "app_id",
            "name",
            unique=True,
            sqlite_where=sa.text("deleted_at IS NULL"),
            postgresql_where=sa.text("deleted_at IS NULL"),
        ),
    )
    id: str = _id()
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    name: str = Field(max_length=64)  # the front matter's name: the folder in the sandbox
    latest_version: int = 0
    deleted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = _now()
    updated_at: datetime = _now()


class SkillVersion(SQLModel, table=True):
    __tablename__ = "skill_version"
    __table_args__ = (sa.UniqueConstraint("skill_id", "number", name="uq_skill_version_number"),)
    id: str = _id()
    skill_id: str = Field(foreign_key="skill.id", index=True, ondelete="CASCADE", max_length=26)
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    number: int
    kind: str = Field(default="zip", max_length=8)  # md | zip
    # The front matter, parsed and checked.
    description: str = Field(max_length=1024)
    license: str = Field(default="", max_length=500)
    compatibility: str = Field(default="", max_length=500)
    skill_metadata: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    allowed_tools: str = Field(default="", max_length=1024)
    skill_md: str = Field(default="", sa_type=sa.Text)  # SKILL.md as uploaded
    # [{"path", "size", "executable"}], sorted by path; SKILL.md among them.
    files: list[dict[str, Any]] = Field(default_factory=list, sa_type=sa.JSON)
    size: int = 0  # of all files, unpacked
    # sha256 over the files (paths, modes, contents): equal content, equal hash.
    content_sha256: str = Field(max_length=64, index=True)
    object_key: str = Field(max_length=300)
    archive_size: int = 0  # of the stored zip, for downloads
    created_at: datetime = _now()
