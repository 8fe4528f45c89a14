"""The App home's `curl` example, pasted into a shell with a real access token in
`$MOSOO_TOKEN`, starts a thread on the App's published Agent (the web process's API on a
loopback port), and the checklist's API step then ticks."""

from __future__ import annotations

import json
import os
import subprocess

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import app_home
from mosoo_core.tables.sessions import AgentSession, SessionRun
from tests.api.conftest import ApiOwner, live_server


def test_the_curl_example_run_in_bash_starts_a_thread(owner: ApiOwner, api_env: Engine) -> None:
    with live_server() as server:
        with Session(api_env) as db:
            example = app_home.api_example(
                db, owner.account_id, owner.app_id, public_url=server.base_url
            )
            assert not {
                s.key: s.done for s in app_home.checklist(db, owner.account_id, owner.app_id)
            }["api"]
        assert example.agent_id == owner.agent_id
        assert owner.token not in example.curl

        result = subprocess.run(
            ["bash", "-c", example.curl],
            env={"PATH": os.environ["PATH"], "MOSOO_TOKEN": owner.token},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    thread_id = answer["thread"]["id"]

    with Session(api_env) as db:
        thread = db.get(AgentSession, thread_id)
        assert thread is not None
        assert (thread.app_id, thread.agent_id, thread.purpose) == (
            owner.app_id,
            owner.agent_id,
            "api",
        )
        runs = db.exec(select(SessionRun).where(SessionRun.session_id == thread_id)).all()
        assert [run.input_text for run in runs] == [app_home.EXAMPLE_MESSAGE]
        steps = {s.key: s.done for s in app_home.checklist(db, owner.account_id, owner.app_id)}
        assert steps["api"] and steps["publish"] and steps["agent"] and steps["provider"]
