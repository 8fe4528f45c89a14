"""Personal access tokens: shown once, stored as a digest, revocable, scoped to their owner."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session, select

from mosoo_core import identity
from mosoo_core.clock import utcnow
from mosoo_core.errors import InvalidInput, NotFound, Unauthenticated
from mosoo_core.tables.identity import AccessToken


def _account(db: Session, email: str) -> str:
    return identity.sign_in_identity(db, provider="email", subject=email, email=email).id


def test_created_secret_authenticates_and_only_its_digest_is_stored(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    created = identity.create_access_token(db, account_id, "  CI   deploys ")
    assert created.secret.startswith("mst_") and len(created.secret) == 4 + 43
    assert created.token.label == "CI deploys"
    assert created.token.source == "console"
    assert created.token.display_suffix == created.secret[-4:]

    row = db.exec(select(AccessToken)).one()
    assert created.secret not in row.token_hash and created.secret[4:] not in row.token_hash
    assert len(row.token_hash) == 64

    view = identity.authenticate_access_token(db, created.secret)
    assert view.id == created.token.id and view.account_id == account_id


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "mst_",
        "Bearer x",
        "mst_" + "a" * 42,
        "mst_" + "a" * 44,
        "xyz_" + "a" * 43,
        "mst_" + "!" * 43,
    ],
)
def test_malformed_secret_is_unauthenticated(db: Session, secret: str) -> None:
    _account(db, "ada@example.com")
    with pytest.raises(Unauthenticated):
        identity.authenticate_access_token(db, secret)


def test_wrong_secret_is_unauthenticated(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    created = identity.create_access_token(db, account_id, "laptop")
    flipped = created.secret[:-1] + ("A" if created.secret[-1] != "A" else "B")
    with pytest.raises(Unauthenticated):
        identity.authenticate_access_token(db, flipped)
    with pytest.raises(Unauthenticated):
        identity.authenticate_access_token(db, None)


def test_revoked_token_stops_working_and_leaves_the_list(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    keep = identity.create_access_token(db, account_id, "keep")
    gone = identity.create_access_token(db, account_id, "gone")
    identity.revoke_access_token(db, account_id, gone.token.id)
    with pytest.raises(Unauthenticated):
        identity.authenticate_access_token(db, gone.secret)
    assert [t.id for t in identity.list_access_tokens(db, account_id)] == [keep.token.id]
    assert identity.authenticate_access_token(db, keep.secret).id == keep.token.id
    with pytest.raises(NotFound):
        identity.revoke_access_token(db, account_id, gone.token.id)


def test_another_owner_cannot_revoke_or_see_a_token(db: Session) -> None:
    owner = _account(db, "owner@example.com")
    intruder = _account(db, "intruder@example.com")
    created = identity.create_access_token(db, owner, "mine")
    with pytest.raises(NotFound):
        identity.revoke_access_token(db, intruder, created.token.id)
    with pytest.raises(NotFound):
        identity.revoke_access_token(db, intruder, "01UNKNOWNTOKENID000000000")
    assert identity.list_access_tokens(db, intruder) == []
    assert identity.authenticate_access_token(db, created.secret).account_id == owner


def test_list_is_newest_first(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    now = utcnow()
    first = identity.create_access_token(db, account_id, "first", now=now - timedelta(hours=2))
    second = identity.create_access_token(
        db, account_id, "second", source="cli", now=now - timedelta(hours=1)
    )
    listed = identity.list_access_tokens(db, account_id)
    assert [t.id for t in listed] == [second.token.id, first.token.id]
    assert [t.source for t in listed] == ["cli", "console"]


def test_last_used_at_is_updated_at_most_once_a_minute(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    now = utcnow()
    created = identity.create_access_token(db, account_id, "api", now=now)
    assert created.token.last_used_at is None

    assert identity.authenticate_access_token(db, created.secret, now=now).last_used_at == now
    later = now + timedelta(seconds=30)
    assert identity.authenticate_access_token(db, created.secret, now=later).last_used_at == now
    much_later = now + timedelta(minutes=2)
    assert (
        identity.authenticate_access_token(db, created.secret, now=much_later).last_used_at
        == much_later
    )
    assert identity.list_access_tokens(db, account_id)[0].last_used_at == much_later


def test_reading_a_token_records_no_use_and_says_when_one_is_due(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    now = utcnow()
    created = identity.create_access_token(db, account_id, "api", now=now)
    read = identity.read_access_token(db, created.secret)
    assert read.id == created.token.id and read.last_used_at is None
    assert identity.list_access_tokens(db, account_id)[0].last_used_at is None
    assert identity.use_unrecorded(read, now)
    used = identity.authenticate_access_token(db, created.secret, now=now)
    assert not identity.use_unrecorded(used, now + timedelta(seconds=59))
    assert identity.use_unrecorded(used, now + timedelta(minutes=1))
    identity.revoke_access_token(db, account_id, created.token.id)
    for secret in (created.secret, "mst_" + "x" * 43, "not-a-token", None):
        with pytest.raises(Unauthenticated):
            identity.read_access_token(db, secret)


@pytest.mark.parametrize("label", ["", "   ", "x" * 81])
def test_bad_label_is_refused_and_creates_nothing(db: Session, label: str) -> None:
    account_id = _account(db, "ada@example.com")
    with pytest.raises(InvalidInput) as error:
        identity.create_access_token(db, account_id, label)
    assert error.value.field == "label"
    assert identity.list_access_tokens(db, account_id) == []


def test_unknown_source_is_refused(db: Session) -> None:
    account_id = _account(db, "ada@example.com")
    with pytest.raises(InvalidInput):
        identity.create_access_token(db, account_id, "x", source="robot")
