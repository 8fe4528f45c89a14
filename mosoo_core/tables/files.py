"""File records: attachments uploaded by callers and artifacts the agent wrote. The bytes
live in the object store under a content-addressed key per App; rows point at them."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id

FILE_KINDS = ("attachment", "artifact")
FILE_STATUSES = ("pending", "ready", "failed", "deleting")


class StoredFile(SQLModel, table=True):
    __tablename__ = "stored_file"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    app_id: str = Field(foreign_key="app.id", index=True, ondelete="CASCADE", max_length=26)
    agent_id: str = Field(foreign_key="agent.id", index=True, ondelete="CASCADE", max_length=26)
    # None while an uploaded attachment is not yet named by a message of a thread.
    session_id: str | None = Field(
        default=None, foreign_key="agent_session.id", index=True, ondelete="CASCADE", max_length=26
    )
    run_id: str | None = Field(
        default=None, max_length=26, index=True
    )  # the run that named / wrote it
    kind: str = Field(max_length=16, index=True)  # attachment | artifact
    status: str = Field(default="pending", max_length=16, index=True)
    name: str = Field(max_length=255)  # sanitized file name
    path: str = Field(default="", max_length=1024)  # artifacts: path under /workspace/outputs
    media_type: str = Field(default="application/octet-stream", max_length=200)
    size: int = 0
    sha256: str = Field(default="", max_length=64, index=True)
    object_key: str = Field(
        default="", max_length=300, index=True
    )  # {app_id}/blobs/sha256/{digest}
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
