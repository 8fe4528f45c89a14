"""What the sign-in hardening costs, in process, against SQLite in a temp dir.

- A console action now re-resolves the session cookie against the database (the tab no
  longer trusts the account id it cached): `resolve_session` per call, against a bare
  `SELECT 1` unit of work in the same run as the baseline.
- A failed code verification now counts the address's and the IP's failures of the last
  hour and commits its try before refusing: one refused `verify_email_code`, against one
  refused send-limit check (`request_email_code` over its limit, the work a refusal did
  before), with 0 and 1,000 failures already in the window.

    .venv/bin/python bench/sign_in.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(label: str, work: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    median = statistics.median(samples)
    print(
        f"  {label:<58} median {median:8.0f} µs   p95 {samples[int(len(samples) * 0.95)]:8.0f} µs"
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    data = tempfile.mkdtemp(prefix="mosoo-bench-signin-")
    os.environ.update(
        MOSOO_DATA_DIR=data,
        MOSOO_SECRET_KEY="bench",
        MOSOO_LOG_JSON="false",
        MOSOO_LOG_LEVEL="WARNING",
        MOSOO_EMAIL_VERIFY_FAILURES_PER_ADDRESS_PER_HOUR="1000000",
        MOSOO_EMAIL_VERIFY_FAILURES_PER_IP_PER_HOUR="1000000",
        MOSOO_EMAIL_SENDS_PER_ADDRESS_PER_HOUR="0",
    )
    import sqlalchemy as sa

    from mosoo_core import identity
    from mosoo_core.clock import utcnow
    from mosoo_core.db import session_scope
    from mosoo_core.errors import InvalidInput, RateLimited
    from mosoo_core.logs import configure_logging
    from mosoo_core.migrations import upgrade
    from mosoo_core.tables.identity import SignInFailure

    configure_logging("bench", "WARNING", False)
    upgrade()
    with session_scope() as db:
        account = identity.sign_in_identity(
            db, provider="email", subject="bench@example.com", email="bench@example.com"
        )
        token = identity.start_session(db, account.id, method="email").token

    def select_one() -> None:
        with session_scope() as db:
            db.execute(sa.text("SELECT 1"))

    def resolve() -> None:
        with session_scope() as db:
            assert identity.resolve_session(db, token)

    def refused_send() -> None:
        try:
            with session_scope() as db:
                identity.request_email_code(db, email="someone@example.com", ip="127.0.0.1")
        except RateLimited:
            pass

    def refused_verify() -> None:
        try:
            with session_scope() as db:
                identity.verify_email_code(
                    db, email="guesser@example.com", code="123456", ip="127.0.0.1"
                )
        except InvalidInput:
            pass

    print(f"sign-in hardening, {rounds} rounds each (SQLite, {data})")
    print("console action: the session check per event")
    base = _timed("baseline: a unit of work running SELECT 1", select_one, rounds)
    check = _timed("resolve_session (each console action now)", resolve, rounds)
    print(
        f"  -> the check costs {check / base:.2f}x a bare unit of work, {check - base:.0f} µs more per action"
    )
    print("refused verification")
    send = _timed("baseline: a send refused by its limit (no write)", refused_send, rounds)
    verify = _timed(
        "refused verify: throttle counts + try + failure committed", refused_verify, rounds
    )
    with session_scope() as db:  # a full window: what an attacker at the limit makes the count read
        now = utcnow()
        db.add_all(
            SignInFailure(email="guesser@example.com", ip="127.0.0.1", created_at=now)
            for _ in range(1000)
        )
    full = _timed(
        "refused verify with 1,000 more failures in the window",
        refused_verify,
        max(200, rounds // 10),
    )
    print(
        f"  -> {verify / send:.2f}x the refused send; {full / verify:.2f}x that with a full window"
    )


if __name__ == "__main__":
    main()
