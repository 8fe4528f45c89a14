"""What was done to an Assistant's (Pet's) sandbox: one row per operation, for the Agent's
Logs (mosoo_core.runtime.pet_operations)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from mosoo_core.clock import utcnow
from mosoo_core.db import UTCDateTime
from mosoo_core.ids import new_id


class PetOperation(SQLModel, table=True):
    __tablename__ = "pet_operation"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    agent_id: str = Field(foreign_key="agent.id", index=True, ondelete="CASCADE", max_length=26)
    account_id: str = Field(max_length=26)  # who asked for it ("system": idle hibernation)
    operation: str = Field(max_length=16)  # restart | recreate | reset | hibernate | wake
    outcome: str = Field(max_length=16)  # done | refused | failed
    error: str = Field(default="", max_length=1000)  # why, when not done
    duration_ms: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
