"""Where a thread's and an Assistant's /workspace checkpoints live in the object store."""

from __future__ import annotations


def checkpoint_prefix(app_id: str, session_id: str) -> str:
    """Every object a thread keeps in the store (its checkpoints)."""
    return f"{app_id}/checkpoints/{session_id}"


def checkpoint_key(app_id: str, session_id: str) -> str:
    """A Task thread's /workspace after its last completed run."""
    return f"{checkpoint_prefix(app_id, session_id)}/workspace.tar"


def pet_checkpoint_key(app_id: str, agent_id: str) -> str:
    """Where a Pet's /workspace waits while its sandbox is recreated (runtime.pets)."""
    return f"{app_id}/checkpoints/pet-{agent_id}/workspace.tar"
