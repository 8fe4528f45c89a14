"""Run orchestration (worker side): freeze the snapshot, get or create the sandbox, boot
the driver, hand it the input; and after the run, checkpoint and tear down.

Cattle: a fresh sandbox per run; `/workspace` is checkpointed to the object store after a
run and restored for the next run of the same thread. Pet: one sandbox per Agent, shared by
its threads (one driver per thread inside it), kept between runs.
Every step is safe to run twice: a task re-delivered after a worker died finds the run past
`queued` and cleans up instead of booting a second sandbox.

A run stopped while its sandbox boots is cancelled at once (sessions.cancel_active_run); its
dispatcher sees that while it waits for the driver and releases what it booted itself. The
teardown the stop asks for stands aside while that dispatcher is alive (`run:{id}:dispatching`
in Redis) and does the work when it is not.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import IO, Any, Literal, cast

import redis
import sqlalchemy as sa
from sqlmodel import Session, col, select

from driver.protocol import (
    ENVIRONMENT_LAYER,
    Assignment,
    BootPayload,
    ExecutionSpec,
    GatewayGrant,
    McpBinding,
    SkillBinding,
)
from mosoo_core import (
    agents,
    environments,
    files,
    mcp,
    sessions,
    skills,
    streams,
    tasks_client,
    tracing,
)
from mosoo_core.clock import utcnow
from mosoo_core.db import session_scope
from mosoo_core.files import (
    checkpoint_key,
    checkpoint_prefix,
    get_store,
    iter_chunks,
    pet_checkpoint_key,
)
from mosoo_core.files.store import ChunkReader
from mosoo_core.logs import get_logger
from mosoo_core.runtime import artifacts, builds, pool
from mosoo_core.runtime import attachments as delivery
from mosoo_core.runtime import skills as skill_files
from mosoo_core.runtime.labels import (
    LABEL_BUILD,
    LABEL_BUILT_FROM,
    LABEL_ENV_LAYER,
    installation_label,
)
from mosoo_core.runtime.sandbox import (
    BOOT_PAYLOAD,
    CONTROL_URL,
    LABEL_DRIVER_INSTANCE,
    LABEL_SUBJECT,
    WORKSPACE,
    Mount,
    SandboxBackend,
    SandboxError,
    SandboxRef,
    SandboxSpec,
    get_backend,
)
from mosoo_core.runtime.setup import run_setup
from mosoo_core.sessions import driver_plane
from mosoo_core.settings import get_settings
from mosoo_core.tables.agents import Agent
from mosoo_core.tables.environments import EnvironmentRevision
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import (
    ACTIVE_RUN_STATUSES,
    AgentSession,
    DriverCommand,
    DriverInstance,
    SessionRun,
)
from mosoo_core.tables.vault import ProviderCredential
from mosoo_core.vault.types import PROVIDER_PRESETS, ProviderKind

log = get_logger(__name__)
READY_TIMEOUT_SECONDS = 60.0
# How often the wait for the driver's ready looks whether the run was stopped meanwhile.
STOP_CHECK_SECONDS = 0.25
# How long a dispatcher's mark on its run outlives it (renewed every third of it).
DISPATCHING_MARK_SECONDS = 15


@dataclass(frozen=True)
class BootPlan:
    run_id: str
    session_id: str
    app_id: str
    agent_id: str
    kind: str
    subject: str
    instance_id: str
    payload_json: str  # holds the boot token and grant: written into the sandbox, never logged
    built_from: str = ""  # agents.sandbox_fingerprint of the profile, labelled on a new Pet sandbox
    # The environment's setup script, run in a new sandbox before the driver, with every
    # variable of the revision (setup-only ones too); the secret values, to mask its output.
    network_policy: str = "none"  # the frozen revision's: none, limited or full
    setup_script: str = ""
    setup_env: dict[str, str] = field(default_factory=dict, repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # The revision's packages: the build whose layer the sandbox mounts ("" for none).
    packages_hash: str = ""
    packages: dict[str, list[str]] = field(default_factory=dict)
    # The run's grant: under `limited`, the setup script reaches the allowed hosts with it.
    grant: str = field(default="", repr=False)
    # The bound skill versions a new sandbox mounts at /opt/mosoo/skills/<name>.
    skills: tuple[skills.BoundSkill, ...] = ()
    # The boot's moments, written with the input (or the failure) for the run's diagnostics.
    marks: driver_plane.MarkClock = field(default_factory=driver_plane.MarkClock)
    # The environment revision the run froze (a Task's sandbox comes from its warm pool key).
    revision_id: str = ""
    runtime: str = ""

    def standby_payload(self) -> bytes:
        """What a Task sandbox's driver boots with: the boot payload without the run, which
        follows as `assign` (so no grant or secret is ever written into the sandbox)."""
        payload = BootPayload.model_validate_json(self.payload_json)
        return payload.model_copy(update={"execution_spec": None}).model_dump_json().encode()

    def assignment(self, *, restore_workspace: bool) -> Assignment:
        """The run, for a standby driver (`assign`)."""
        payload = BootPayload.model_validate_json(self.payload_json)
        assert payload.execution_spec is not None
        return Assignment(
            execution_spec=payload.execution_spec,
            traceparent=payload.traceparent,
            restore_workspace=restore_workspace,
        )


def remove_agent_sandboxes(
    deleted: agents.DeletedAgent, backend: SandboxBackend | None = None
) -> int:
    """Remove a deleted Agent's Pet sandbox and the sandboxes of its drivers that were still
    live. Returns how many were removed; what a failure leaves behind, `sweep_sandboxes` removes."""
    if not deleted.had_sandboxes:
        return 0  # no driver ever ran for it: nothing to look for (and no backend to start)
    backend = backend or get_backend()
    selectors = [{LABEL_SUBJECT: deleted.subject, **installation_label()}]
    selectors += [
        {LABEL_DRIVER_INSTANCE: instance_id} for instance_id in deleted.driver_instance_ids
    ]
    removed = 0
    for labels in selectors:
        for ref in backend.list_by_label(labels):
            try:
                backend.remove(ref)
                removed += 1
            except SandboxError as error:
                log.warning(
                    "agent.sandbox_remove_failed", agent_id=deleted.agent_id, error=str(error)[:300]
                )
    return removed


def delete_agent_everywhere(
    account_id: str, app_id: str, agent_id: str, backend: SandboxBackend | None = None
) -> agents.DeletedAgent:
    """Delete an Agent for good, the one call the console and the API make: the database rows
    first (committed, so nothing new starts on it), then its threads' checkpoints in the
    object store, then its sandboxes. NotFound when the account does not own it."""
    with session_scope() as db:
        object_keys = files.agent_object_keys(db, agent_id)  # its file rows go by cascade
        deleted = agents.delete_agent(db, account_id, app_id, agent_id)
    files.purge_objects(object_keys)
    store = get_store()
    for thread_id in deleted.thread_ids:
        store.delete_prefix(checkpoint_prefix(deleted.app_id, thread_id))
    store.delete_prefix(pet_checkpoint_key(deleted.app_id, deleted.agent_id).rsplit("/", 1)[0])
    sandboxes = remove_agent_sandboxes(deleted, backend)
    log.info(
        "agent.deleted", agent_id=agent_id, threads=len(deleted.thread_ids), sandboxes=sandboxes
    )
    return deleted


def _fail(
    db: Session, run: SessionRun, code: str, message: str, retryable: bool
) -> list[sessions.StoredEvent]:
    return driver_plane.finish_run(
        db, run, "failed", code=code, message=message, retryable=retryable, emit_event=True
    )


def openai_api_style(db: Session, credential_id: str) -> Literal["chat_completions", "responses"]:
    """Which OpenAI API the `openai` runtime speaks to a run's provider. The Responses API
    only where we know the provider has it: OpenAI itself (the `openai` preset). DeepSeek,
    OpenRouter, Ollama and custom OpenAI-compatible servers all speak Chat Completions,
    most of them not the Responses API, so they keep it."""
    credential = db.get(ProviderCredential, credential_id)
    if credential is not None and credential.provider == ProviderKind.OPENAI:
        return "responses"
    return "chat_completions"


def gateway_api(db: Session, credential_id: str) -> Literal["openai", "anthropic"]:
    """The gateway route a run's provider speaks natively: the Anthropic preset has the
    Messages API (`/gateway/anthropic/v1`), every other preset the OpenAI-compatible one."""
    credential = db.get(ProviderCredential, credential_id)
    if credential is None or credential.provider not in PROVIDER_PRESETS:
        return "openai"
    return PROVIDER_PRESETS[ProviderKind(credential.provider)].gateway_api


def plan_boot(
    db: Session, run_id: str, backend: SandboxBackend | None = None
) -> tuple[BootPlan | None, list[sessions.StoredEvent]]:
    """Freeze the run's snapshot and register its driver. None when there is nothing to boot.
    For a Pet, `backend` (default: the configured one) says whether its sandbox exists and
    what that sandbox mounts. The run is claimed first, by one conditional UPDATE: of two
    dispatches of one run (a task the broker delivered twice, or one the beat sent again for
    a run it thought lost), only one boots it; the other gets None."""
    if not _claim_queued(db, run_id):
        return None, []
    run = db.get(SessionRun, run_id)
    assert run is not None
    session = db.get(AgentSession, run.session_id)
    agent = db.get(Agent, session.agent_id) if session else None
    if session is None or agent is None:
        return None, _fail(
            db, run, "agent_missing", "The agent of this thread no longer exists.", False
        )
    # The pinned version's frozen profile, or the live draft (Preview threads).
    profile = agents.thread_profile(db, agent, session.agent_version)
    if profile is None:
        return None, _fail(
            db,
            run,
            "agent_version_missing",
            "The agent version of this thread no longer exists.",
            False,
        )
    ready = agents.readiness(db, profile)
    if not ready.ready:
        reasons = "; ".join(b.message for b in ready.blockers)
        return None, _fail(
            db, run, "readiness_blocked", f"The agent is not ready: {reasons}", False
        )
    assert profile.provider_credential_id is not None
    subject = f"agent:{agent.id}" if profile.kind == "pet" else f"session:{session.id}"
    # Asked before anything is written: a Pet run uses the Agent's sandbox if there is one.
    pet_sandbox = _pet_sandbox(backend or get_backend(), subject) if profile.kind == "pet" else None
    driver = driver_plane.register_driver(
        db, app_id=run.app_id, subject=subject, runtime=profile.runtime, session_id=session.id
    )
    grant = driver_plane.issue_model_grant(
        db, run, credential_id=profile.provider_credential_id, allowed_models=[profile.model]
    )
    # Bindings: only resources that exist go into the spec (readiness let missing skills
    # pass with a warning); the snapshot records what was bound, found or not.
    bound_skills = skills.bound_skills(db, run.app_id, profile.skills)
    # Each bound, enabled MCP server gets a grant of its own for this run: the proxy takes
    # it instead of the server's credential, which never enters the sandbox.
    mcp_servers = [
        McpBinding(
            ref=binding.server_id,
            name=binding.name,
            grant=mcp.issue_grant(db, run, binding.server_id),
            default_policy=binding.default_policy,
            tool_policies=binding.tool_policies,
            required=binding.required,
        )
        for binding in mcp.run_bindings(db, run.app_id, profile.mcp_servers, profile.mcp_policies)
    ]
    # A Task (Cattle) thread runs the revision it froze. An Assistant (Pet) is one sandbox its
    # threads share: it runs its environment's current revision, and what needs a new sandbox
    # (the setup script, none/full) shows as pending until Apply.
    revision = (
        environments.revision_for_thread(db, session.app_id, profile.environment_id)
        if profile.kind == "pet"
        else _frozen_revision(db, session, profile.environment_id)
    )
    if pet_sandbox is not None:
        # Until Apply the Pet's sandbox keeps the skills it was made with: the run lists those
        # (the prompt must never name a SKILL.md that is not mounted), not the ones bound since.
        bound_skills = _mounted_skills(db, pet_sandbox, profile, revision.id, bound_skills)
    variables = environments.run_variables(db, revision.id)
    packages = {k: list(v) for k, v in (revision.packages or {}).items() if v}
    layer_env = _layer_environment(packages)
    spec = ExecutionSpec(
        app_id=run.app_id,
        agent_id=agent.id,
        session_id=session.id,
        runtime=profile.runtime,
        model=profile.model,
        system_prompt=profile.system_prompt,
        tools=dict(profile.tools),
        provider_options=dict(profile.provider_options),
        gateway=GatewayGrant(
            grant=grant,
            provider=gateway_api(db, profile.provider_credential_id),
            api_style=openai_api_style(db, profile.provider_credential_id),
        ),
        skills=[
            SkillBinding(
                id=bound.skill_id,
                name=bound.name,
                description=bound.description,
                version=bound.version,
                path=skill_files.skill_path(bound),
            )
            for bound in bound_skills
        ],
        mcp_servers=mcp_servers,
        # The agent's processes get the variables that are not setup-only; secrets among them
        # travel in the boot payload (read and deleted by the driver), never the container's env.
        environment={v.name: v.value for v in variables if not v.setup_only} | layer_env,
        secret_variables=[v.name for v in variables if v.secret and not v.setup_only],
        network_policy=revision.network_policy,
    )
    # The stored snapshot never holds a grant, nor any variable's value.
    run.snapshot = {
        **spec.model_dump(
            exclude={
                "gateway": True,
                "environment": True,
                "secret_variables": True,
                "network_policy": True,
                "mcp_servers": {"__all__": {"grant"}},
            }
        ),
        "environment": {
            "environment_id": revision.environment_id,
            "revision_id": revision.id,
            "revision": revision.number,
            "network_policy": revision.network_policy,
            "allowed_hosts": list(revision.allowed_hosts or []),
            "allow_package_indexes": revision.allow_package_indexes,
            "variables": [v.name for v in variables],
        },
        "kind": profile.kind,
        "credential_id": profile.provider_credential_id,
        "agent_version": session.agent_version,
        "bindings": {
            "environment_id": profile.environment_id,
            "skills": list(profile.skills),
            "mcp_servers": list(profile.mcp_servers),
        },
        # The dispatch span's W3C header ("" untraced): control parents the driver's spans on it.
        "traceparent": tracing.traceparent(),
    }
    run.status = "booting"
    run.driver_instance_id = driver.instance_id
    db.add(run)
    payload = BootPayload(
        control_url=CONTROL_URL,
        driver_instance_id=driver.instance_id,
        boot_token=driver.boot_token,
        runtime=profile.runtime,
        execution_spec=spec,
        traceparent=run.snapshot["traceparent"],
    )
    plan = BootPlan(
        run_id=run.id,
        session_id=session.id,
        app_id=run.app_id,
        agent_id=agent.id,
        kind=profile.kind,
        subject=subject,
        instance_id=driver.instance_id,
        payload_json=payload.model_dump_json(),
        built_from=agents.sandbox_fingerprint(
            profile, revision.id, [bound.version_id for bound in bound_skills]
        ),
        network_policy=revision.network_policy,
        setup_script=revision.setup_script,
        setup_env={v.name: v.value for v in variables} | layer_env,
        secrets=tuple(v.value for v in variables if v.secret),
        packages_hash=revision.packages_hash,
        packages=packages,
        grant=grant,
        skills=tuple(bound_skills),
        revision_id=revision.id,
        runtime=profile.runtime,
    )
    return plan, []


def _claim_queued(db: Session, run_id: str) -> bool:
    """`queued` -> `booting`, only if the run is still queued. The UPDATE takes the row's write
    lock (PostgreSQL) or the database's (SQLite) until this transaction ends, so a concurrent
    claim waits and then finds the run no longer queued; a rollback gives it back."""
    result = db.execute(
        sa.update(SessionRun)
        .where(col(SessionRun.id) == run_id, col(SessionRun.status) == "queued")
        .values(status="booting")
    )  # the ORM updates a copy of the run already in this session, so none stays `queued`
    return int(getattr(result, "rowcount", 0)) == 1  # a CursorResult; Session.execute says Result


def _pet_sandbox(backend: SandboxBackend, subject: str) -> SandboxRef | None:
    """The Pet's sandbox, as `sandbox_for` finds it; None when the run will make one."""
    refs = backend.list_by_label({LABEL_SUBJECT: subject, **installation_label()})
    return refs[0] if refs else None


def _mounted_skills(
    db: Session,
    ref: SandboxRef,
    profile: agents.AgentView,
    revision_id: str,
    bound: list[skills.BoundSkill],
) -> list[skills.BoundSkill]:
    """The skill versions an existing Pet sandbox mounts (its label). One made before that
    label mounts the bound ones when its skills are not pending; else nothing is listed."""
    version_ids = skill_files.mounted_versions(ref.labels)
    if version_ids is not None:
        return skills.bound_versions(db, profile.app_id, version_ids)
    pending = agents.pending_sandbox_fields(
        profile, ref.labels.get(LABEL_BUILT_FROM), revision_id, [b.version_id for b in bound]
    )
    return [] if "skills" in pending else bound


def _layer_environment(packages: dict[str, list[str]]) -> dict[str, str]:
    """What finds the packages of a layer (the image's PATH already names its `bin`
    folders, and its NODE_PATH the node_modules). Python's path is set only for the agent's
    own processes and the setup script: the driver must not import an owner's packages."""
    if packages.get("pip"):
        return {"PYTHONPATH": f"{ENVIRONMENT_LAYER}/python"}
    return {}


def _frozen_revision(
    db: Session, session: AgentSession, environment_id: str | None
) -> EnvironmentRevision:
    """The environment revision the thread froze; a thread from before environments existed
    freezes the current one of its environment now, and keeps it."""
    revision = (
        db.get(EnvironmentRevision, session.environment_revision_id)
        if session.environment_revision_id
        else None
    )
    if revision is None:
        revision = environments.revision_for_thread(db, session.app_id, environment_id)
        session.environment_revision_id = revision.id
        db.add(session)
    return revision


def sandbox_for(
    backend: SandboxBackend, plan: BootPlan, layer: builds.LayerOutcome | None = None
) -> tuple[SandboxRef, bool]:
    """The run's sandbox, and whether it is new (a new one runs the setup script). A new one
    mounts the environment's layer when the revision has packages."""
    if plan.kind == "pet":
        for ref in backend.list_by_label({LABEL_SUBJECT: plan.subject, **installation_label()}):
            if ref.state != "running":
                backend.start(ref)
            plan.marks.mark("sandbox", created=False, sandbox=ref.id[:64])
            return ref, False
    ref = backend.create(_sandbox_spec(plan, layer))
    plan.marks.mark("sandbox", created=True, sandbox=ref.id[:64], image=backend.image_name())
    if plan.kind == "pet":
        restored = _restore_pet_workspace(
            backend, ref, plan
        )  # even for a stopped run: later runs reuse this sandbox
    else:
        store = get_store()
        key = checkpoint_key(plan.app_id, plan.session_id)
        restored = store.exists(key) and _still_wanted(plan.run_id)  # a stopped run needs none
        if restored:
            backend.put_archive(ref, WORKSPACE, iter_chunks(store.open(key)))
    if restored:
        plan.marks.mark("restore")
    return ref, True


def _restore_pet_workspace(backend: SandboxBackend, ref: SandboxRef, plan: BootPlan) -> bool:
    """A Pet sandbox recreated by Apply gets the /workspace checkpointed before; the
    checkpoint goes once restored. If the restore fails the new sandbox goes instead, so the
    next run tries again rather than carrying on with an empty workspace. False when there
    was nothing to restore."""
    store = get_store()
    key = pet_checkpoint_key(plan.app_id, plan.agent_id)
    if not store.exists(key):
        return False
    try:
        with store.open(key) as source:
            backend.put_archive(ref, WORKSPACE, iter_chunks(source))
    except SandboxError:
        backend.remove(ref)
        raise
    store.delete(key)
    return True


def dispatching_key(run_id: str) -> str:
    return f"run:{run_id}:dispatching"


class _DispatchingMark:
    """A Redis key saying that a live dispatcher is booting the run (renewed by a thread, so a
    long step such as an image build keeps it; gone DISPATCHING_MARK_SECONDS after the
    dispatcher died). Without Redis there is no mark, and a teardown just goes ahead."""

    def __init__(self, run_id: str) -> None:
        self.key = dispatching_key(run_id)
        self.token = secrets.token_hex(8)
        self.client = streams.sync_client()
        self.ended = threading.Event()
        self.renewer: threading.Thread | None = None

    def start(self) -> None:
        try:
            self.client.set(self.key, self.token, ex=DISPATCHING_MARK_SECONDS)
        except redis.RedisError as error:
            log.warning("run.dispatching_mark_failed", key=self.key, error=type(error).__name__)
            return
        self.renewer = threading.Thread(target=self._renew, name=f"renew {self.key}", daemon=True)
        self.renewer.start()

    def _renew(self) -> None:
        while not self.ended.wait(DISPATCHING_MARK_SECONDS / 3):
            # On failure it lapses: a teardown may then run beside this dispatcher, which is safe.
            with contextlib.suppress(redis.RedisError):
                self.client.expire(self.key, DISPATCHING_MARK_SECONDS)

    def end(self) -> None:
        """Idempotent; removes the key only while it is still this dispatcher's."""
        self.ended.set()
        if self.renewer is not None:
            self.renewer.join(timeout=5)
            self.renewer = None
            with contextlib.suppress(redis.RedisError):
                if self.client.get(self.key) == self.token.encode():
                    self.client.delete(self.key)


def _dispatcher_alive(run_id: str) -> bool:
    try:
        return bool(streams.sync_client().exists(dispatching_key(run_id)))
    except redis.RedisError:
        return False


def _still_wanted(run_id: str) -> bool:
    """Whether the run is still waiting for its driver (not stopped, its thread not deleted)."""
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        return run is not None and run.status in ACTIVE_RUN_STATUSES


def _wait_ready(run_id: str, instance_id: str, timeout: float) -> str:
    """Wait for the driver's ready: "ready", "stopped" (the run was stopped or its thread
    deleted), "refused:<why>" (the driver could not take its run: `assign` failed) or
    "timeout". Blocks on control's ready signal, looking at the database between waits
    (every 0.25 s)."""
    client = streams.sync_client()
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        if streams.await_ready(instance_id, min(STOP_CHECK_SECONDS, remaining), client):
            return "ready"
        verdict = _boot_verdict(run_id, instance_id)
        if verdict:
            return verdict
    return "timeout"


def _boot_verdict(run_id: str, instance_id: str) -> str:
    """Why waiting for the driver is over before its ready ("" when it is not)."""
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        if run is None or run.status not in ACTIVE_RUN_STATUSES:
            return "stopped"
        refused = db.exec(
            select(DriverCommand.error).where(
                DriverCommand.driver_instance_id == instance_id,
                DriverCommand.kind == "assign",
                DriverCommand.status == "failed",
            )
        ).first()
        return f"refused:{refused or 'no reason given'}" if refused is not None else ""


def dispatch_run(run_id: str, backend: SandboxBackend | None = None) -> str:
    """Boot a sandbox and driver for a queued run and give it the input. Returns the run's
    status. A run stopped during the boot has what the boot made released before this returns:
    its Cattle sandbox removed, or (Pet) its driver stopped and its attachments taken out."""
    mark = _DispatchingMark(run_id)
    mark.start()
    try:
        return _dispatch(run_id, backend, mark)
    finally:
        mark.end()


def _dispatch(run_id: str, backend: SandboxBackend | None, mark: _DispatchingMark) -> str:
    plan: BootPlan | None = None
    events: list[sessions.StoredEvent] = []
    picked_up = driver_plane.MarkClock()
    picked_up.mark("dispatch")
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        if run is not None and run.status == "booting":
            # A worker died while booting this run: clean up and fail it clearly.
            events = _abandon_boot(db, run, backend)
            streams.publish_events(events)
            return "failed"
        # A worker died while booting this run, which was stopped meanwhile: release its boot.
        stopped_boot = (
            run is not None
            and run.status not in ACTIVE_RUN_STATUSES
            and run.driver_instance_id is not None
            and run.started_at is None
        )
        if not stopped_boot:
            plan, events = plan_boot(db, run_id, backend)
    streams.publish_events(events)
    if stopped_boot:
        _release_run_sandbox(run_id, backend)
        return _status(run_id)
    if plan is None:
        return "skipped"
    plan.marks.taken.update(picked_up.taken)
    backend = backend or get_backend()
    started = time.monotonic()
    ref = None
    attachments: list[dict[str, Any]] = []
    layer = None
    if plan.packages_hash:
        layer = _await_layer(backend, plan)
        if layer.failure:
            with session_scope() as db:
                _stop_driver(db, plan.instance_id, "environment build failed")
            return _fail_by_id(
                run_id, "environment_build_failed", layer.failure[:2000], False, plan.marks
            )
        if layer.stopped:
            return _release_stopped_boot(backend, plan, started)
        plan.marks.mark("environment", layer=layer.layer)
    try:
        if plan.kind == "pet":
            ref, stopped, attachments, failure = _boot_in_pet_sandbox(backend, plan, layer)
        else:
            plan, ref, stopped, attachments, failure = _boot_task_sandbox(backend, plan, layer)
        if failure:
            return failure
    except SandboxError as error:
        log.warning("run.sandbox_failed", run_id=run_id, error=str(error)[:300])
        if ref is not None and plan.kind == "pet":
            delivery.remove_attachments(backend, ref, _attachment_ids(run_id))
        _teardown(backend, plan.instance_id, plan.kind)
        plan.marks.mark("teardown")
        return _fail_by_id(
            run_id,
            "sandbox_failed",
            f"The sandbox could not start: {error.message[:300]}",
            True,
            plan.marks,
        )
    outcome = "stopped" if stopped else _wait_ready(run_id, plan.instance_id, READY_TIMEOUT_SECONDS)
    if outcome == "timeout":
        _teardown(backend, plan.instance_id, plan.kind)
        plan.marks.mark("teardown")
        return _fail_by_id(
            run_id,
            "driver_boot_timeout",
            "The driver did not report ready within 60 seconds.",
            True,
            plan.marks,
        )
    if outcome.startswith("refused:"):  # the driver could not take its run (`assign` failed)
        _teardown(backend, plan.instance_id, plan.kind)
        plan.marks.mark("teardown")
        return _fail_by_id(
            run_id,
            "sandbox_failed",
            f"The sandbox could not start the run: {outcome.removeprefix('refused:')[:300]}",
            True,
            plan.marks,
        )
    if outcome == "ready":
        with session_scope() as db:
            run = db.get(SessionRun, run_id)
            if run is not None and run.status in ACTIVE_RUN_STATUSES:
                plan.marks.mark("input")
                plan.marks.write(db, run_id)
                driver_plane.enqueue_command(
                    db,
                    plan.instance_id,
                    "input.start",
                    {"run_id": run_id, "text": run.input_text, "attachments": attachments},
                )
            else:
                outcome = "stopped"
    if outcome == "stopped":
        return _release_stopped_boot(backend, plan, started)
    mark.end()  # before the driver hears of its input, so the run's own teardown never waits for us
    streams.notify_driver(plan.instance_id)
    log.info(
        "run.dispatched",
        run_id=run_id,
        instance_id=plan.instance_id,
        seconds=round(time.monotonic() - started, 3),
    )
    return "booting"


_Attachments = list[dict[str, Any]]


def _boot_in_pet_sandbox(
    backend: SandboxBackend, plan: BootPlan, layer: builds.LayerOutcome | None
) -> tuple[SandboxRef, bool, _Attachments, str]:
    """An Assistant's run: its Agent's sandbox (made, or woken, when there is none), then a
    driver of its own in it, booted from a payload with the run written into the sandbox.
    (sandbox, stopped, attachments, failure: the run's status when the boot failed it)."""
    _tell_if_waking(backend, plan)
    ref, created = sandbox_for(backend, plan, layer)
    # Looked at between the steps: once the run is stopped, nothing more goes in.
    stopped = not _still_wanted(plan.run_id)
    if created and plan.setup_script and not stopped:
        failure = _set_up(backend, ref, plan)
        if failure:
            return ref, False, [], failure
        plan.marks.mark("setup")
        stopped = not _still_wanted(plan.run_id)
    attachments: _Attachments = []
    if not stopped:
        delivery.remove_stale_attachments(backend, ref)
        # Before input.start: the driver names them in the user message, so they must be there.
        attachments = _deliver_attachments(backend, ref, plan)
        stopped = not _still_wanted(plan.run_id)
    if not stopped:
        backend.put_file(ref, BOOT_PAYLOAD, plan.payload_json.encode(), mode=0o600)
        backend.start_driver(ref)
        plan.marks.mark("driver_start")
    return ref, stopped, attachments, ""


def _boot_task_sandbox(
    backend: SandboxBackend, plan: BootPlan, layer: builds.LayerOutcome | None
) -> tuple[BootPlan, SandboxRef | None, bool, _Attachments, str]:
    """A Task's run: a sandbox of its warm pool key taken from the pool (its driver standing
    by, connected), else one started cold with its driver booting standby as the container
    starts. Either way the run reaches the driver as `assign` over the control connection
    (spec, grants, whether to restore the thread's workspace), never as a file. On a hit the
    claim and the assignment are one transaction: the driver hears of its run at once.
    (plan: its driver the member's on a hit, sandbox, stopped, attachments, failure)."""
    key = pool.KeySpec(
        host=get_settings().sandbox_host,
        app_id=plan.app_id,
        runtime=plan.runtime,
        image=backend.image_name(),
        revision_id=plan.revision_id,
        network_policy=plan.network_policy,
        layer=layer.layer if layer is not None and layer.path is not None else "",
        skill_versions=tuple(bound.version_id for bound in plan.skills),
    )
    # The checkpoint of the thread's last completed run: the driver fetches it from control.
    restore = get_store().exists(checkpoint_key(plan.app_id, plan.session_id))
    with session_scope() as db:
        run = db.get(SessionRun, plan.run_id)
        if run is None or run.status not in ACTIVE_RUN_STATUSES:
            return plan, None, True, [], ""  # stopped while it waited (nothing was claimed)
        claimed = pool.claim(db, key, plan.run_id, plan.session_id)
        if claimed is not None:
            # The run's driver is the member's; the one registered for a cold start never boots.
            run.driver_instance_id = claimed.instance_id
            db.add(run)
            driver_plane.mark_stopped(db, plan.instance_id)
            driver_plane.enqueue_assignment(
                db, claimed.instance_id, plan.assignment(restore_workspace=restore)
            )
    _ask_for_refill(key)
    if claimed is not None:
        streams.notify_driver(claimed.instance_id)
        plan = replace(plan, instance_id=claimed.instance_id)
        ref = claimed.sandbox(backend)
        plan.marks.mark("sandbox", created=False, pool="hit", sandbox=ref.id[:64])
    else:
        ref = backend.create_with_driver(_sandbox_spec(plan, layer), plan.standby_payload())
        plan.marks.mark(
            "sandbox", created=True, pool="miss", sandbox=ref.id[:64], image=backend.image_name()
        )
        if plan.setup_script and _still_wanted(plan.run_id):
            failure = _set_up(backend, ref, plan)
            if failure:
                return plan, ref, False, [], failure
            plan.marks.mark("setup")
        if not _still_wanted(plan.run_id):
            return plan, ref, True, [], ""
        with session_scope() as db:
            driver_plane.enqueue_assignment(
                db, plan.instance_id, plan.assignment(restore_workspace=restore)
            )
        streams.notify_driver(plan.instance_id)
    plan.marks.mark("driver_start", assigned=True, restore=restore)
    # While the driver takes its run: the files it names in the run's input (input.start).
    attachments = _deliver_attachments(backend, ref, plan)
    return plan, ref, False, attachments, ""


def _deliver_attachments(backend: SandboxBackend, ref: SandboxRef, plan: BootPlan) -> _Attachments:
    attachments = delivery.deliver_attachments(backend, ref, plan.run_id)
    if attachments:
        plan.marks.mark("attachments", files=len(attachments))
    return attachments


def _sandbox_spec(plan: BootPlan, layer: builds.LayerOutcome | None) -> SandboxSpec:
    """A new sandbox for the run: the environment's layer and the bound skills mounted."""
    labels = installation_label() | skill_files.skills_label(plan.skills)
    if plan.kind == "pet":
        labels[LABEL_BUILT_FROM] = plan.built_from
    mounts: tuple[Mount, ...] = ()
    if layer is not None and layer.path is not None:
        labels[LABEL_ENV_LAYER] = layer.layer
        mounts = (builds.layer_mount(layer.path),)
    return SandboxSpec(
        subject=plan.subject,
        app_id=plan.app_id,
        driver_instance_id=plan.instance_id,
        control_socket=get_settings().resolved_control_socket,
        labels=labels,
        mounts=mounts + skill_files.skill_mounts(plan.skills),
        # `limited` stays on no network at all: its only way out is control's egress proxy.
        network="full" if plan.network_policy == "full" else "none",
    )


def _ask_for_refill(key: pool.KeySpec) -> None:
    """A run took a member or found none: the pool makes the next in the background."""
    if pool.target_size(key.runtime, key.network_policy) <= 0:
        return
    try:
        tasks_client.enqueue_pool_refill()
    except Exception:  # the beat's maintenance refills too
        log.warning("pool.refill_not_queued")


def _release_stopped_boot(backend: SandboxBackend, plan: BootPlan, boot_started: float) -> str:
    """The run was stopped (or its thread deleted) while its sandbox booted: release what the
    boot made now, as after any run (what a failure leaves, `sweep_sandboxes` removes)."""
    try:
        with session_scope() as db:
            _write_marks(db, plan.run_id, plan.marks)
        if _release_run_sandbox(plan.run_id, backend) == "skipped":  # the run went with its thread
            _teardown(backend, plan.instance_id, plan.kind)
    except SandboxError as error:
        log.warning("run.boot_release_failed", run_id=plan.run_id, error=str(error)[:300])
    log.info(
        "run.boot_stopped",
        run_id=plan.run_id,
        instance_id=plan.instance_id,
        seconds=round(time.monotonic() - boot_started, 3),
    )
    return _status(plan.run_id)


def _status(run_id: str) -> str:
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        return run.status if run is not None else "missing"


def _attachment_ids(run_id: str) -> list[str]:
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        return [str(item.get("file_id", "")) for item in (run.attachments if run else [])]


def _await_layer(backend: SandboxBackend, plan: BootPlan) -> builds.LayerOutcome:
    """Wait for the revision's packages (building them here if nobody is), the chat showing
    "Preparing environment" (a `run.preparing` event) while it waits."""

    return builds.await_layer(
        plan.packages_hash,
        plan.packages,
        backend=backend,
        still_wanted=lambda: _still_wanted(plan.run_id),
        on_wait=lambda status: _tell_preparing(plan, "environment", status),
    )


def _tell_preparing(plan: BootPlan, stage: str, status: str) -> None:
    """A `run.preparing` event in the run's thread: what the run waits for before it starts."""
    with session_scope() as db:
        events = driver_plane.append_events(
            db,
            plan.session_id,
            [
                driver_plane.NewEvent(
                    type="run.preparing",
                    payload={"stage": stage, "status": status},
                    run_id=plan.run_id,
                )
            ],
        )
    streams.publish_events(events)


def _tell_if_waking(backend: SandboxBackend, plan: BootPlan) -> None:
    """A hibernated Assistant (no sandbox, its workspace saved) is woken by this run: the
    chat says "Waking the assistant…" while `sandbox_for` builds it and restores the files."""
    if plan.kind != "pet" or _pet_sandbox(backend, plan.subject) is not None:
        return
    if get_store().exists(pet_checkpoint_key(plan.app_id, plan.agent_id)):
        _tell_preparing(plan, "wake", "waking")


def _set_up(backend: SandboxBackend, ref: SandboxRef, plan: BootPlan) -> str:
    """Run the setup script in the new sandbox; "" when it succeeded. A failure fails the run
    with `setup_failed` and the log's tail, and removes the sandbox (Pet or Cattle)."""
    result = run_setup(
        backend,
        ref,
        plan.setup_script,
        plan.setup_env,
        plan.secrets,
        egress_grant=plan.grant if plan.network_policy == "limited" else "",
    )
    with session_scope() as db:
        run = db.get(SessionRun, plan.run_id)
        if run is not None:
            run.setup_log = result.log
            db.add(run)
    if result.ok:
        return ""
    log.info("run.setup_failed", run_id=plan.run_id)
    plan.marks.mark("setup", ok=False)
    backend.remove(ref)
    with session_scope() as db:
        _stop_driver(db, plan.instance_id, "setup failed")
    plan.marks.mark("teardown")
    return _fail_by_id(plan.run_id, "setup_failed", result.message, False, plan.marks)


def _fail_by_id(
    run_id: str,
    code: str,
    message: str,
    retryable: bool,
    marks: driver_plane.MarkClock | None = None,
) -> str:
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        events = _fail(db, run, code, message, retryable) if run else []
        if run is not None and marks is not None:
            marks.write(db, run_id)
    streams.publish_events(events)
    return "failed"


def _abandon_boot(
    db: Session, run: SessionRun, backend: SandboxBackend | None
) -> list[sessions.StoredEvent]:
    instance = db.get(DriverInstance, run.driver_instance_id) if run.driver_instance_id else None
    if instance is not None:
        if run.snapshot.get("kind", "cattle") == "pet":
            _stop_driver(db, instance.id, "boot abandoned")
        else:
            _remove_sandboxes_of(backend or get_backend(), instance.id)
            driver_plane.mark_stopped(db, instance.id)
    return _fail(
        db,
        run,
        "dispatch_interrupted",
        "The worker stopped while starting the sandbox. Send the message again.",
        True,
    )


def _teardown(backend: SandboxBackend, instance_id: str, kind: str) -> None:
    """Release what one driver's boot made: its Cattle sandbox, or only the driver in a Pet's."""
    if kind == "pet":
        with session_scope() as db:
            live = _stop_driver(db, instance_id, "boot abandoned")
        if live:
            streams.notify_driver(instance_id)
        return
    _remove_sandboxes_of(backend, instance_id)


def _remove_sandboxes_of(backend: SandboxBackend, instance_id: str) -> None:
    for ref in backend.list_by_label({LABEL_DRIVER_INSTANCE: instance_id}):
        backend.remove(ref)
    with session_scope() as db:
        pool.forget_member(db, instance_id)


def _stop_driver(db: Session, instance_id: str, reason: str) -> bool:
    """Stop one driver and nothing else (the Pet sandbox it runs in outlives it): a connected
    driver is told `session.stop`, one still booting is refused at hello. False when it was
    already stopped (nothing is queued twice)."""
    instance = db.get(DriverInstance, instance_id)
    if instance is None or instance.status == "stopped":
        return False
    driver_plane.enqueue_command(db, instance_id, "session.stop", {"reason": reason})
    driver_plane.mark_stopped(db, instance_id)
    return True


def finish_run_sandbox(run_id: str, backend: SandboxBackend | None = None) -> str:
    """After a run ends: its outputs become artifacts; Cattle checkpoints `/workspace` (when
    the run completed) and removes its sandbox; Pet keeps its sandbox but loses the run's
    attachments (they are mounted for one message only) and, when the run never started on
    it (stopped while booting), the run's driver. "deferred" while the run's dispatcher is
    still alive: it releases what it booted itself. Safe to run twice."""
    if _dispatcher_alive(run_id):
        return "deferred"
    return _release_run_sandbox(run_id, backend)


def _release_run_sandbox(run_id: str, backend: SandboxBackend | None = None) -> str:
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        if run is None or run.status in ACTIVE_RUN_STATUSES or not run.driver_instance_id:
            return "skipped"
        instance_id, kind, status = (
            run.driver_instance_id,
            run.snapshot.get("kind", "cattle"),
            run.status,
        )
        app_id, session_id = run.app_id, run.session_id
        attached = [str(item.get("file_id", "")) for item in run.attachments]
        # A file a newer message of the thread named again is that run's now (Pet: it stays).
        rebound = (
            set(
                db.exec(
                    select(StoredFile.id).where(
                        col(StoredFile.id).in_(attached), StoredFile.run_id != run_id
                    )
                ).all()
            )
            if attached
            else set()
        )
        attached = [file_id for file_id in attached if file_id not in rebound]
        started = run.started_at is not None  # a run that never started wrote nothing
        instance = db.get(DriverInstance, instance_id)
        subject = instance.subject if instance is not None else ""
        released = instance is None or instance.status == "stopped"
    if kind == "pet" and not started and released:
        # Its boot was released already (attachments out, then the driver stopped): what its
        # attachments folder holds now may be a newer run's, the thread's next message.
        return "kept"
    backend = backend or get_backend()
    marks = driver_plane.MarkClock()
    if kind == "pet":
        pets = (
            backend.list_by_label({LABEL_SUBJECT: subject, **installation_label()})
            if subject
            else []
        )
        for ref in pets[:1]:
            if ref.state == "running" and started:
                _record_outputs(backend, ref, run_id)
                marks.mark("outputs")
            delivery.remove_attachments(backend, ref, attached)
        with session_scope() as db:
            # A driver serves one run: once it is over the driver goes (the sandbox stays).
            # Kept connected, each run's driver held its runtime's SDK (about 60 MB) until the
            # Assistant hibernated.
            reason = "run finished" if started else "run stopped before it started"
            live = _stop_driver(db, instance_id, reason)
            marks.mark("teardown", sandbox="kept")
            _write_marks(db, run_id, marks)
        if live:
            streams.notify_driver(instance_id)
        return "kept"
    refs = backend.list_by_label({LABEL_DRIVER_INSTANCE: instance_id})
    for ref in refs[:1] if started else []:
        _record_outputs(backend, ref, run_id)
        marks.mark("outputs")
    if status == "completed":
        for ref in refs[:1]:
            try:
                _checkpoint(backend, ref, app_id, session_id)
                marks.mark("checkpoint")
            except SandboxError as error:
                log.warning("run.checkpoint_failed", run_id=run_id, error=str(error)[:300])
    for ref in refs:
        backend.remove(ref)
    marks.mark("teardown", sandbox="removed")
    with session_scope() as db:
        driver_plane.mark_stopped(db, instance_id)
        pool.forget_member(db, instance_id)  # when the sandbox came from the warm pool
        _write_marks(db, run_id, marks)
    return "removed"


def _write_marks(db: Session, run_id: str, marks: driver_plane.MarkClock) -> None:
    # The run may have gone with its thread while its sandbox was released.
    if db.get(SessionRun, run_id) is not None:
        marks.write(db, run_id)


def record_run_outputs(
    backend: SandboxBackend, ref: SandboxRef, run_id: str
) -> list[files.FileView]:
    """Record the run's new or changed outputs as artifacts of its thread and announce them
    in one `session_files.updated` event (none when nothing changed). Safe to run twice."""
    changed = artifacts.record_artifacts(backend, ref, run_id)
    if not changed:
        return []
    with session_scope() as db:
        run = db.get(SessionRun, run_id)
        if run is None:
            return changed
        events = driver_plane.append_events(
            db,
            run.session_id,
            [
                driver_plane.NewEvent(
                    type="session_files.updated",
                    run_id=run_id,
                    source_event_id=f"session_files:{run_id}",
                    payload={"run_id": run_id, "files": [view.to_public() for view in changed]},
                )
            ],
        )
    streams.publish_events(events)
    return changed


def _record_outputs(backend: SandboxBackend, ref: SandboxRef, run_id: str) -> None:
    """Artifacts are worth a warning, never a sandbox left behind or a lost checkpoint."""
    try:
        record_run_outputs(backend, ref, run_id)
    except Exception as error:
        log.warning("run.artifacts_failed", run_id=run_id, error=str(error)[:300])


def _checkpoint(backend: SandboxBackend, ref: SandboxRef, app_id: str, session_id: str) -> None:
    get_store().put(
        checkpoint_key(app_id, session_id),
        cast(IO[bytes], ChunkReader(backend.get_archive(ref, WORKSPACE))),
    )


STUCK_BOOT_AFTER = timedelta(seconds=READY_TIMEOUT_SECONDS + 60)


def sweep_stuck_boots(backend: SandboxBackend | None = None, *, now: datetime | None = None) -> int:
    """Runs left `booting` by a worker that died (its task would only come back much later):
    fail them with a clear error and remove what their boot created."""
    now = now or utcnow()
    failed = 0
    with session_scope() as db:
        stuck = db.exec(
            select(SessionRun, DriverInstance)
            .join(DriverInstance, DriverInstance.id == SessionRun.driver_instance_id)  # type: ignore[arg-type]
            .where(
                SessionRun.status == "booting",
                DriverInstance.ready_at == None,  # noqa: E711
                DriverInstance.created_at < now - STUCK_BOOT_AFTER,
            )
        ).all()
        events = []
        for run, _instance in stuck:
            events += _abandon_boot(db, run, backend)
            failed += 1
    streams.publish_events(events)
    return failed


def sweep_sandboxes(
    backend: SandboxBackend | None = None, *, grace: timedelta = timedelta(minutes=2)
) -> int:
    """Remove sandboxes nothing needs any more: a Cattle sandbox whose driver's run is over
    (or unknown), a Pet sandbox whose Agent was deleted."""
    backend = backend or get_backend()
    removed = 0
    now = utcnow()
    with session_scope() as db:
        for ref in backend.list_by_label(installation_label()):
            subject = ref.labels.get(LABEL_SUBJECT, "")
            instance_id = ref.labels.get(LABEL_DRIVER_INSTANCE, "")
            waiting = (
                pool.sandbox_needed(db, subject.removeprefix(pool.SUBJECT_PREFIX))
                if subject.startswith(pool.SUBJECT_PREFIX)
                else None
            )
            if waiting is not None:  # a warm pool member not claimed yet, or forgotten
                needed = waiting
            elif subject.startswith("agent:"):
                needed = db.get(Agent, subject.removeprefix("agent:")) is not None
            elif subject.startswith(builds.BUILD_SUBJECT_PREFIX):
                needed = builds.build_sandbox_needed(db, ref.labels.get(LABEL_BUILD, ""))
            else:
                instance = db.get(DriverInstance, instance_id) if instance_id else None
                run = (
                    db.exec(
                        select(SessionRun).where(SessionRun.driver_instance_id == instance.id)
                    ).first()
                    if instance is not None
                    else None
                )
                needed = instance is not None and (
                    (run is not None and run.status in ACTIVE_RUN_STATUSES)
                    or instance.created_at > now - grace
                )
            if not needed:
                backend.remove(ref)
                removed += 1
    log.info("sandbox.swept", removed=removed)
    return removed
