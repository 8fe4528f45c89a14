"""Envelope encryption, the master key and its rotation."""

from __future__ import annotations

import base64
import logging
import os
import stat
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, select
from structlog.testing import capture_logs
from typer.testing import CliRunner

from mosoo_core import identity, vault
from mosoo_core.cli import app as cli_app
from mosoo_core.db import session_scope
from mosoo_core.settings import reset_settings_cache
from mosoo_core.tables.vault import VaultSecret
from mosoo_core.vault._crypto import Sealed, seal, unseal

CONTEXT = (
    "01APP00000000000000000000A",
    "01REC00000000000000000000A",
    "provider_credential:x:api_key",
)


def _app_id(db: Session, email: str) -> str:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return identity.list_apps(db, account.id)[0].id


def _flip(blob: bytes, index: int) -> bytes:
    return blob[:index] + bytes([blob[index] ^ 0x01]) + blob[index + 1 :]


# --- the cipher -------------------------------------------------------------------------


def test_seal_then_unseal_returns_the_value() -> None:
    kek = vault.MasterKey.generate()
    value = "sk-live-ünïcødé-🔑".encode()
    sealed = seal(kek, value, CONTEXT)
    assert sealed.key_id == kek.key_id
    assert value not in sealed.ciphertext and value not in sealed.wrapped_key
    assert unseal(kek, sealed, CONTEXT) == value


def test_every_secret_gets_its_own_data_key_and_nonce() -> None:
    kek = vault.MasterKey.generate()
    first, second = seal(kek, b"same value", CONTEXT), seal(kek, b"same value", CONTEXT)
    assert first.wrapped_key != second.wrapped_key
    assert first.ciphertext != second.ciphertext


@pytest.mark.parametrize(
    "other_context",
    [
        ("01APP00000000000000000000B", CONTEXT[1], CONTEXT[2]),  # another App
        (CONTEXT[0], "01REC00000000000000000000B", CONTEXT[2]),  # another record
        (CONTEXT[0], CONTEXT[1], "provider_credential:y:api_key"),  # another owner
        (CONTEXT[0] + CONTEXT[1][:1], CONTEXT[1][1:], CONTEXT[2]),  # same bytes, other split
    ],
)
def test_a_ciphertext_does_not_open_under_another_app_or_record(
    other_context: tuple[str, str, str],
) -> None:
    kek = vault.MasterKey.generate()
    sealed = seal(kek, b"secret", CONTEXT)
    with pytest.raises(vault.VaultError):
        unseal(kek, sealed, other_context)


def test_a_tampered_ciphertext_or_wrapped_key_is_refused() -> None:
    kek = vault.MasterKey.generate()
    sealed = seal(kek, b"secret value", CONTEXT)
    for index in (0, 5, len(sealed.ciphertext) // 2, len(sealed.ciphertext) - 1):
        tampered = Sealed(sealed.key_id, sealed.wrapped_key, _flip(sealed.ciphertext, index))
        with pytest.raises(vault.VaultError):
            unseal(kek, tampered, CONTEXT)
    for index in (3, len(sealed.wrapped_key) - 1):
        tampered = Sealed(sealed.key_id, _flip(sealed.wrapped_key, index), sealed.ciphertext)
        with pytest.raises(vault.VaultError):
            unseal(kek, tampered, CONTEXT)
    with pytest.raises(vault.VaultError):
        unseal(kek, Sealed(sealed.key_id, sealed.wrapped_key, sealed.ciphertext[:10]), CONTEXT)


def test_another_master_key_cannot_open_a_secret() -> None:
    sealed = seal(vault.MasterKey.generate(), b"secret", CONTEXT)
    other = vault.MasterKey.generate()
    with pytest.raises(vault.VaultError, match="master key"):
        unseal(other, sealed, CONTEXT)
    # Even when the stored key id is forged to match, the wrapped key does not open.
    with pytest.raises(vault.VaultError):
        unseal(other, Sealed(other.key_id, sealed.wrapped_key, sealed.ciphertext), CONTEXT)


# --- the master key ---------------------------------------------------------------------


def test_the_master_key_file_is_created_0600_on_first_use_and_reused(
    isolated_settings: Path,
) -> None:
    path = isolated_settings / "master.key"
    assert not path.exists()
    first = vault.load_master_key()
    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(base64.b64decode(path.read_text().strip())) == 32
    assert vault.load_master_key().key_id == first.key_id
    assert [p.name for p in path.parent.iterdir()] == ["master.key"]  # no temporary file left


def test_the_master_key_from_the_environment_wins_and_no_file_is_made(
    isolated_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = vault.MasterKey.generate()
    monkeypatch.setenv("MOSOO_MASTER_KEY", key.to_text())
    reset_settings_cache()
    assert vault.load_master_key().key_id == key.key_id
    assert not (isolated_settings / "master.key").exists()


def test_a_configured_key_file_path_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys" / "kek"
    monkeypatch.setenv("MOSOO_MASTER_KEY_FILE", str(path))
    reset_settings_cache()
    created = vault.load_master_key()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert vault.read_key_file(path).key_id == created.key_id


def test_without_create_a_missing_key_file_is_an_error(isolated_settings: Path) -> None:
    with pytest.raises(vault.VaultError, match="does not exist"):
        vault.load_master_key(create=False)
    assert not (isolated_settings / "master.key").exists()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not base64!",
        base64.b64encode(b"short").decode(),
        base64.b64encode(os.urandom(33)).decode(),
    ],
    ids=["empty", "not base64", "too short", "too long"],  # the same in every xdist worker
)
def test_a_malformed_master_key_is_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("MOSOO_MASTER_KEY", text or "=")
    reset_settings_cache()
    with pytest.raises(vault.VaultError):
        vault.load_master_key()


def test_a_master_key_never_prints_its_bytes() -> None:
    key = vault.MasterKey.generate()
    shown = repr(key) + str(key)
    assert (
        key.to_text() not in shown
        and repr(key.secret) not in shown
        and key.secret.hex() not in shown
    )


def test_an_existing_key_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    original = vault.create_key_file(path)
    with pytest.raises(FileExistsError):
        vault.create_key_file(path)
    assert vault.read_key_file(path).key_id == original.key_id


# --- secrets in the database ------------------------------------------------------------


def test_a_stored_secret_reveals_and_its_row_holds_no_plaintext(db: Session) -> None:
    app_id = _app_id(db, "owner@example.com")
    value = "sk-proj-THISISTHEPLAINTEXTVALUE-1234"
    secret_id = vault.store_secret(db, app_id=app_id, owner_ref="test:1", value=value)
    assert vault.reveal_secret(db, secret_id, app_id=app_id, owner_ref="test:1") == value
    row = (
        db.connection()
        .execute(sa.text("SELECT * FROM vault_secret WHERE id = :id"), {"id": secret_id})
        .one()
    )
    for column in row:
        raw = column if isinstance(column, bytes) else str(column).encode()
        assert value.encode() not in raw
        assert value.encode()[:12] not in raw


def test_a_secret_asked_for_by_another_app_or_owner_does_not_decrypt(db: Session) -> None:
    app_id = _app_id(db, "owner@example.com")
    other_app = _app_id(db, "other@example.com")
    secret_id = vault.store_secret(db, app_id=app_id, owner_ref="test:1", value="value")
    with pytest.raises(vault.VaultError):
        vault.reveal_secret(db, secret_id, app_id=other_app, owner_ref="test:1")
    with pytest.raises(vault.VaultError):
        vault.reveal_secret(db, secret_id, app_id=app_id, owner_ref="test:2")


def test_replacing_a_secret_gives_it_a_new_data_key(db: Session) -> None:
    app_id = _app_id(db, "owner@example.com")
    secret_id = vault.store_secret(db, app_id=app_id, owner_ref="test:1", value="first")
    before = db.get(VaultSecret, secret_id)
    assert before is not None
    old_wrapped = before.wrapped_key
    vault.replace_secret(db, secret_id, app_id=app_id, owner_ref="test:1", value="second")
    db.expire_all()
    after = db.get(VaultSecret, secret_id)
    assert after is not None and after.wrapped_key != old_wrapped
    assert vault.reveal_secret(db, secret_id, app_id=app_id, owner_ref="test:1") == "second"


# --- rotation ---------------------------------------------------------------------------


def _use_key(monkeypatch: pytest.MonkeyPatch, key: vault.MasterKey) -> None:
    monkeypatch.setenv("MOSOO_MASTER_KEY", key.to_text())
    reset_settings_cache()


def _seed(engine: Engine, values: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Secrets in two Apps under the configured key; returns an App id and {secret_id: value}."""
    ids: dict[str, str] = {}
    with session_scope(engine) as db:
        apps = [_app_id(db, "rot-a@example.com"), _app_id(db, "rot-b@example.com")]
        for index, (ref, value) in enumerate(values.items()):
            ids[vault.store_secret(db, app_id=apps[index % 2], owner_ref=ref, value=value)] = ref
    return apps[0], ids


def _rows(engine: Engine) -> dict[str, VaultSecret]:
    with Session(engine) as db:
        return {row.id: row for row in db.exec(select(VaultSecret)).all()}


def test_rotate_rewraps_every_data_key_and_only_the_new_key_opens_them(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = vault.MasterKey.generate(), vault.MasterKey.generate()
    _use_key(monkeypatch, old)
    values = {f"test:{n}": f"value-number-{n}" for n in range(5)}
    _, ids = _seed(engine, values)
    before = _rows(engine)

    with session_scope(engine) as db:
        result = vault.rotate_master_key(db, old_key=old, new_key=new)
    assert (result.rewrapped, result.already_current) == (5, 0)
    assert (result.old_key_id, result.new_key_id) == (old.key_id, new.key_id)

    after = _rows(engine)
    with Session(engine) as db:
        assert vault.count_secrets_by_key(db) == {new.key_id: 5}
        for secret_id, ref in ids.items():
            assert (
                after[secret_id].ciphertext == before[secret_id].ciphertext
            )  # only the data key moved
            assert after[secret_id].wrapped_key != before[secret_id].wrapped_key
            row = after[secret_id]
            assert (
                vault.reveal_secret(db, secret_id, app_id=row.app_id, owner_ref=ref, master_key=new)
                == values[ref]
            )
            with pytest.raises(vault.VaultError):
                vault.reveal_secret(db, secret_id, app_id=row.app_id, owner_ref=ref, master_key=old)
            # The old key fails on the bytes too, not only on the key id.
            forged = Sealed(old.key_id, row.wrapped_key, row.ciphertext)
            with pytest.raises(vault.VaultError):
                unseal(old, forged, (row.app_id, row.id, ref))


def test_rotate_again_picks_up_secrets_sealed_under_the_old_key_meanwhile(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = vault.MasterKey.generate(), vault.MasterKey.generate()
    _use_key(monkeypatch, old)
    app_id, _ = _seed(engine, {"test:1": "one", "test:2": "two"})
    with session_scope(engine) as db:
        vault.rotate_master_key(db, old_key=old, new_key=new)
    with session_scope(engine) as db:  # a process still on the old key
        late = vault.store_secret(db, app_id=app_id, owner_ref="test:late", value="late")
    with session_scope(engine) as db:
        result = vault.rotate_master_key(db, old_key=old, new_key=new)
    assert (result.rewrapped, result.already_current) == (1, 2)
    with Session(engine) as db:
        assert (
            vault.reveal_secret(db, late, app_id=app_id, owner_ref="test:late", master_key=new)
            == "late"
        )


def test_rotate_changes_nothing_when_a_secret_is_under_neither_key(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new, stray = (vault.MasterKey.generate() for _ in range(3))
    _use_key(monkeypatch, old)
    app_id, _ = _seed(engine, {"test:1": "one", "test:2": "two"})
    with session_scope(engine) as db:
        vault.store_secret(db, app_id=app_id, owner_ref="test:stray", value="x", master_key=stray)
    before = _rows(engine)
    with pytest.raises(vault.VaultError, match="neither key"), session_scope(engine) as db:
        vault.rotate_master_key(db, old_key=old, new_key=new)
    after = _rows(engine)
    assert {k: (v.key_id, v.wrapped_key) for k, v in after.items()} == {
        k: (v.key_id, v.wrapped_key) for k, v in before.items()
    }


def test_rotate_changes_nothing_when_a_secret_fails_to_decrypt(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = vault.MasterKey.generate(), vault.MasterKey.generate()
    _use_key(monkeypatch, old)
    _, ids = _seed(engine, {"test:1": "one", "test:2": "two", "test:3": "three"})
    damaged = sorted(ids)[-1]
    with engine.begin() as connection:
        row = connection.execute(
            sa.text("SELECT ciphertext FROM vault_secret WHERE id = :id"), {"id": damaged}
        ).one()
        connection.execute(
            sa.text("UPDATE vault_secret SET ciphertext = :c WHERE id = :id"),
            {"c": _flip(bytes(row[0]), 20), "id": damaged},
        )
    with pytest.raises(vault.VaultError), session_scope(engine) as db:
        vault.rotate_master_key(db, old_key=old, new_key=new)
    with Session(engine) as db:
        assert vault.count_secrets_by_key(db) == {old.key_id: 3}


def test_rotate_refuses_the_same_key(db: Session) -> None:
    key = vault.MasterKey.generate()
    with pytest.raises(vault.VaultError, match="same"):
        vault.rotate_master_key(db, old_key=key, new_key=vault.MasterKey(key.secret))


def test_cli_rotate_writes_a_new_0600_key_and_the_switched_key_reads_every_secret(
    engine: Engine, isolated_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = vault.load_master_key()  # the key file of a default install
    values = {"test:1": "alpha-secret", "test:2": "beta-secret"}
    _, ids = _seed(engine, values)
    new_path = isolated_settings / "new.key"

    runner = CliRunner()
    result = runner.invoke(cli_app, ["vault", "rotate", "--new-key-file", str(new_path)])
    assert result.exit_code == 0, result.output
    assert "re-wrapped 2 data key(s)" in result.output
    assert stat.S_IMODE(new_path.stat().st_mode) == 0o600
    assert new_path.read_text().strip() not in result.output  # the key itself is never printed

    # Before switching, status reports secrets under a key that is not the configured one.
    assert runner.invoke(cli_app, ["vault", "status"]).exit_code == 1

    monkeypatch.setenv("MOSOO_MASTER_KEY_FILE", str(new_path))
    reset_settings_cache()
    status = runner.invoke(cli_app, ["vault", "status"])
    assert status.exit_code == 0 and "2 secret(s)" in status.output
    with Session(engine) as db:
        rows = _rows(engine)
        for secret_id, ref in ids.items():
            assert (
                vault.reveal_secret(db, secret_id, app_id=rows[secret_id].app_id, owner_ref=ref)
                == values[ref]
            )
            with pytest.raises(vault.VaultError):
                vault.reveal_secret(
                    db, secret_id, app_id=rows[secret_id].app_id, owner_ref=ref, master_key=old
                )


def test_cli_rotate_without_a_current_key_fails_and_creates_none(
    engine: Engine, isolated_settings: Path
) -> None:
    result = CliRunner().invoke(
        cli_app, ["vault", "rotate", "--new-key-file", str(isolated_settings / "n.key")]
    )
    assert result.exit_code == 1
    assert "does not exist" in result.output
    assert CliRunner().invoke(cli_app, ["vault", "status"]).exit_code == 1
    assert not (isolated_settings / "master.key").exists()


def test_no_plaintext_or_ciphertext_reaches_the_logs(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = vault.MasterKey.generate(), vault.MasterKey.generate()
    _use_key(monkeypatch, old)
    with capture_logs() as events, caplog.at_level(logging.DEBUG):
        app_id, ids = _seed(engine, {"test:1": "PLAINTEXT-MARKER-VALUE"})
        with session_scope(engine) as db:
            vault.rotate_master_key(db, old_key=old, new_key=new)
            secret_id = next(iter(ids))
            vault.reveal_secret(db, secret_id, app_id=app_id, owner_ref="test:1", master_key=new)
    row = _rows(engine)[secret_id]
    logged = repr(events) + caplog.text
    assert "vault.rotated" in logged
    for needle in (
        "PLAINTEXT-MARKER-VALUE",
        row.ciphertext.hex(),
        repr(row.ciphertext)[2:40],
        base64.b64encode(row.ciphertext).decode(),
        row.wrapped_key.hex(),
        old.to_text(),
        new.to_text(),
    ):
        assert needle not in logged
