"""Control's side of protocol v2 (the warm pool's standby drivers), against a real control
server played by a scripted driver: the assignment sealed in the database and opened only on
the driver's socket, the two kinds of ready, and `GET /driver/workspace`."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from driver.protocol import Assignment, ExecutionSpec, GatewayGrant
from mosoo_core import streams
from mosoo_core.files import checkpoint_key, get_store
from mosoo_core.sessions import driver_plane
from mosoo_core.tables.sessions import DriverCommand, DriverInstance, SessionRun
from tests.control.conftest import TEST_REDIS_DB, Booted, ControlServer, boot_fixture, recv_json

GRANT_IN_SPEC = "mgr_grant-that-must-not-be-stored-in-clear"
SECRET_VALUE = "secret-variable-value-9876"


def _assignment(booted: Booted, *, restore: bool = False) -> Assignment:
    return Assignment(
        execution_spec=ExecutionSpec(
            app_id=booted.app_id,
            agent_id=booted.agent_id,
            session_id=booted.session_id,
            runtime="openai",
            model="m",
            gateway=GatewayGrant(grant=GRANT_IN_SPEC),
            environment={"API_TOKEN": SECRET_VALUE},
            secret_variables=["API_TOKEN"],
        ),
        restore_workspace=restore,
    )


def _instance(engine: Engine, instance_id: str) -> DriverInstance:
    with Session(engine) as db:
        instance = db.get(DriverInstance, instance_id)
        assert instance is not None
        return instance


def _hello(instance_id: str, boot_token: str, version: int = 2) -> str:
    return json.dumps(
        {
            "type": "hello",
            "driver_instance_id": instance_id,
            "boot_token": boot_token,
            "protocol_version": version,
            "driver_version": "test",
            "runtime": "openai",
            "capabilities": [],
            "pid": 1,
        }
    )


def test_a_standby_driver_gets_its_run_sealed_at_rest_and_opened_on_its_socket(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)

    async def scenario() -> dict[str, object]:
        async with control.connect() as ws:
            await ws.send(_hello(booted.instance_id, booted.boot_token))
            assert (await recv_json(ws))["type"] == "welcome"
            await ws.send(json.dumps({"type": "ready", "at": "now", "standby": True}))
            for _ in range(100):
                if _instance(engine, booted.instance_id).standby_at is not None:
                    break
                await asyncio.sleep(0.05)
            standing_by = _instance(engine, booted.instance_id)
            with Session(engine) as db:
                command = driver_plane.enqueue_assignment(
                    db, booted.instance_id, _assignment(booted)
                )
                db.commit()
                stored = json.dumps(command.payload)
            streams.notify_driver(booted.instance_id)
            received = await recv_json(ws)
            await ws.send(
                json.dumps(
                    {
                        "type": "command_update",
                        "command_id": received["command_id"],
                        "status": "completed",
                    }
                )
            )
            await ws.send(
                json.dumps(
                    {"type": "ready", "at": "now", "capabilities": ["text_stream", "cancel"]}
                )
            )
            ready = await asyncio.to_thread(streams.await_ready, booted.instance_id, 10)
            return {
                "standing_by": standing_by,
                "stored": stored,
                "received": received,
                "ready": ready,
            }

    result = asyncio.run(scenario())
    standing_by = result["standing_by"]
    assert isinstance(standing_by, DriverInstance)
    assert standing_by.ready_at is None  # a member is ready for a run, not in one
    # At rest the assignment is ciphertext; on the socket it is the run itself.
    assert GRANT_IN_SPEC not in str(result["stored"]) and SECRET_VALUE not in str(result["stored"])
    received = result["received"]
    assert isinstance(received, dict) and received["kind"] == "assign"
    assert received["payload"]["execution_spec"]["gateway"]["grant"] == GRANT_IN_SPEC
    assert result["ready"] is True
    instance = _instance(engine, booted.instance_id)
    assert instance.ready_at is not None and instance.capabilities == ["text_stream", "cancel"]
    with Session(engine) as db:
        row = db.exec(
            select(DriverCommand).where(DriverCommand.driver_instance_id == booted.instance_id)
        ).one()
        assert row.status == "completed" and row.payload == {}  # wiped once done


def test_an_assignment_sealed_for_another_driver_does_not_open_and_fails_alone(
    engine: Engine,
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        other = driver_plane.register_driver(
            db, app_id=booted.app_id, subject="pool:x", runtime="openai"
        )
        sealed = driver_plane.enqueue_assignment(db, booted.instance_id, _assignment(booted))
        # The other driver's queue gets a copy of that ciphertext, then a plain command.
        copied = driver_plane.enqueue_command(db, other.instance_id, "assign", dict(sealed.payload))
        driver_plane.enqueue_command(db, other.instance_id, "session.stop", {"reason": "x"})
        db.commit()
        sent = driver_plane.commands_to_send(db, other.instance_id)
        db.commit()
        assert [command.kind for command in sent] == ["session.stop"]
        failed = db.get(DriverCommand, copied.id)
        assert failed is not None and failed.status == "failed" and failed.payload == {}
        assert failed.error
        mine = driver_plane.commands_to_send(db, booted.instance_id)
        assert [command.kind for command in mine] == ["assign"]


def test_control_takes_protocol_1_and_2_and_refuses_others(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        old = boot_fixture(db, email="v1@example.com")
        future = boot_fixture(db, email="v3@example.com")

    async def answer(booted: Booted, version: int) -> dict[str, object]:
        async with control.connect() as ws:
            await ws.send(_hello(booted.instance_id, booted.boot_token, version))
            return await recv_json(ws)

    assert asyncio.run(answer(old, 1))["type"] == "welcome"
    refused = asyncio.run(answer(future, 3))
    assert refused["type"] == "close" and refused["code"] == "protocol_version"


def _workspace(control: ControlServer, grant: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {grant}"} if grant else {}
    transport = httpx.HTTPTransport(uds=str(control.socket_path))
    with httpx.Client(transport=transport, base_url="http://control") as client:
        return client.get("/driver/workspace", headers=headers)


def test_the_workspace_goes_only_to_a_live_task_runs_grant(
    control: ControlServer, engine: Engine
) -> None:
    with Session(engine) as db:
        booted = boot_fixture(db)
        pet = boot_fixture(db, email="pet@example.com")
        run = db.get(SessionRun, booted.run_id)
        pet_run = db.get(SessionRun, pet.run_id)
        assert run is not None and pet_run is not None
        run.snapshot, pet_run.snapshot = {"kind": "cattle"}, {"kind": "pet"}
        grant = driver_plane.issue_model_grant(db, run, credential_id="c", allowed_models=["m"])
        pet_grant = driver_plane.issue_model_grant(
            db, pet_run, credential_id="c", allowed_models=["m"]
        )
        db.add_all([run, pet_run])
        db.commit()

    assert _workspace(control, None).status_code == 401
    assert _workspace(control, "mgr_not-a-grant").status_code == 401
    assert _workspace(control, pet_grant).status_code == 401
    assert _workspace(control, grant).status_code == 204  # the thread's first run
    tar = b"a checkpoint" * 1000
    get_store().put(checkpoint_key(booted.app_id, booted.session_id), io.BytesIO(tar))
    answer = _workspace(control, grant)
    assert answer.status_code == 200 and answer.content == tar
    with Session(engine) as db:
        run = db.get(SessionRun, booted.run_id)
        assert run is not None
        run.status = "completed"
        db.add(run)
        db.commit()
    assert _workspace(control, grant).status_code == 401  # the run is over: so is its grant
    assert redis.Redis(db=TEST_REDIS_DB).ping()
