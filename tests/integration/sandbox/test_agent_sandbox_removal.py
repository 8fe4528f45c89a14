"""Deleting an Agent removes its Pet sandbox and its live drivers' Cattle sandboxes, on
both backends, and leaves every other Agent's sandbox running."""

from __future__ import annotations

from mosoo_core.agents import DeletedAgent
from mosoo_core.runtime.runs import installation_label, remove_agent_sandboxes
from mosoo_core.runtime.sandbox import SandboxBackend
from tests.integration.sandbox.conftest import RUN_LABEL, MakeSandbox

DOOMED, KEPT = "01DOOMEDAGENT0000000000000", "01KEPTAGENT000000000000000"


def test_removing_a_deleted_agents_sandboxes_leaves_other_agents_alone(
    backend: SandboxBackend, make_sandbox: MakeSandbox, test_run_id: str
) -> None:
    pet = make_sandbox(subject=f"agent:{DOOMED}", labels=installation_label())
    cattle = make_sandbox(
        subject="session:01DOOMEDTHREAD000000000000",
        driver_instance_id="01DOOMEDDRIVER000000000000",
    )
    other = make_sandbox(subject=f"agent:{KEPT}", labels=installation_label())
    deleted = DeletedAgent(
        agent_id=DOOMED,
        app_id="app_test",
        subject=f"agent:{DOOMED}",
        thread_ids=["01DOOMEDTHREAD000000000000"],
        driver_instance_ids=["01DOOMEDDRIVER000000000000"],
        had_sandboxes=True,
    )

    assert remove_agent_sandboxes(deleted, backend) == 2

    left = {ref.id for ref in backend.list_by_label({RUN_LABEL: test_run_id})}
    assert pet.id not in left and cattle.id not in left
    assert other.id in left
