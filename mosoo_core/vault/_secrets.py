"""Sealed secrets in the database, and re-wrapping them all under a new master key.

These functions do not check ownership: they are called by services that already did
(provider credentials, later environment variables and MCP credentials).
"""

from __future__ import annotations

from sqlmodel import Session, col, func, select

from mosoo_core.clock import utcnow
from mosoo_core.errors import NotFound
from mosoo_core.ids import new_id
from mosoo_core.logs import get_logger
from mosoo_core.tables.vault import VaultSecret
from mosoo_core.vault._crypto import Sealed, rewrap, seal, unseal
from mosoo_core.vault._errors import VaultError
from mosoo_core.vault._keys import MasterKey, load_master_key
from mosoo_core.vault.types import RotationResult

SECRET_MAX_CHARS = 65_536
log = get_logger("mosoo.vault")


def _context(app_id: str, secret_id: str, owner_ref: str) -> tuple[str, str, str]:
    return (app_id, secret_id, owner_ref)


def _sealed(secret: VaultSecret) -> Sealed:
    return Sealed(
        key_id=secret.key_id, wrapped_key=secret.wrapped_key, ciphertext=secret.ciphertext
    )


def store_secret(
    db: Session, *, app_id: str, owner_ref: str, value: str, master_key: MasterKey | None = None
) -> str:
    """Seal `value` under a fresh data key and store it; returns the secret id."""
    if len(value) > SECRET_MAX_CHARS:
        raise VaultError("The secret is too large.")
    secret_id = new_id()
    sealed = seal(
        master_key or load_master_key(), value.encode(), _context(app_id, secret_id, owner_ref)
    )
    db.add(
        VaultSecret(
            id=secret_id,
            app_id=app_id,
            owner_ref=owner_ref,
            key_id=sealed.key_id,
            wrapped_key=sealed.wrapped_key,
            ciphertext=sealed.ciphertext,
        )
    )
    db.flush()
    return secret_id


def replace_secret(
    db: Session,
    secret_id: str,
    *,
    app_id: str,
    owner_ref: str,
    value: str,
    master_key: MasterKey | None = None,
) -> None:
    """Give an existing secret a new value (and a new data key)."""
    if len(value) > SECRET_MAX_CHARS:
        raise VaultError("The secret is too large.")
    secret = db.get(VaultSecret, secret_id)
    if secret is None or secret.app_id != app_id or secret.owner_ref != owner_ref:
        raise NotFound("Secret not found.")
    sealed = seal(
        master_key or load_master_key(), value.encode(), _context(app_id, secret.id, owner_ref)
    )
    secret.key_id, secret.wrapped_key, secret.ciphertext = (
        sealed.key_id,
        sealed.wrapped_key,
        sealed.ciphertext,
    )
    secret.updated_at = utcnow()
    db.add(secret)
    db.flush()


def reveal_secret(
    db: Session, secret_id: str, *, app_id: str, owner_ref: str, master_key: MasterKey | None = None
) -> str:
    """The plaintext. `app_id` and `owner_ref` are what the caller expects the secret to belong
    to; they are authenticated, so a secret moved to another App or record fails (VaultError)."""
    secret = db.get(VaultSecret, secret_id)
    if secret is None:
        raise NotFound("Secret not found.")
    plaintext = unseal(
        master_key or load_master_key(), _sealed(secret), _context(app_id, secret.id, owner_ref)
    )
    return plaintext.decode()


def delete_secret(db: Session, secret_id: str) -> None:
    secret = db.get(VaultSecret, secret_id)
    if secret is not None:
        db.delete(secret)
        db.flush()


def count_secrets_by_key(db: Session) -> dict[str, int]:
    """How many secrets each master key wraps (by key id)."""
    rows = db.exec(select(VaultSecret.key_id, func.count()).group_by(col(VaultSecret.key_id))).all()
    return {key_id: count for key_id, count in rows}


def _lock_for_rotation(db: Session) -> None:
    # Hold writers off for the whole re-wrap so no secret is sealed under the old key meanwhile.
    connection = db.connection()
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("LOCK TABLE vault_secret IN SHARE ROW EXCLUSIVE MODE")
    else:
        # SQLite takes its write lock at the first write statement, whether or not rows match.
        connection.exec_driver_sql("UPDATE vault_secret SET key_id = key_id WHERE 1 = 0")


def rotate_master_key(db: Session, *, old_key: MasterKey, new_key: MasterKey) -> RotationResult:
    """Re-wrap every data key from `old_key` to `new_key`, verifying that each secret decrypts
    under `new_key`. Safe to run again (secrets already under `new_key` are verified and kept).

    Run it in one unit of work and commit only if it returns: any secret under an unknown key
    or failing verification raises VaultError and nothing must be committed.
    """
    if old_key.key_id == new_key.key_id:
        raise VaultError("The new master key is the same as the old one.")
    _lock_for_rotation(db)
    rewrapped = already_current = 0
    unknown: dict[str, int] = {}
    for secret in db.exec(select(VaultSecret).order_by(col(VaultSecret.id))).all():
        context = _context(secret.app_id, secret.id, secret.owner_ref)
        if secret.key_id == new_key.key_id:
            unseal(new_key, _sealed(secret), context)
            already_current += 1
            continue
        if secret.key_id != old_key.key_id:
            unknown[secret.key_id] = unknown.get(secret.key_id, 0) + 1
            continue
        sealed = rewrap(old_key, new_key, _sealed(secret), context)
        secret.key_id, secret.wrapped_key = sealed.key_id, sealed.wrapped_key
        secret.updated_at = utcnow()
        db.add(secret)
        rewrapped += 1
    if unknown:
        described = ", ".join(
            f"{count} under {key_id}" for key_id, count in sorted(unknown.items())
        )
        raise VaultError(
            f"Some secrets are sealed under neither key ({described}); nothing was changed."
        )
    db.flush()
    log.info(
        "vault.rotated",
        old_key_id=old_key.key_id,
        new_key_id=new_key.key_id,
        rewrapped=rewrapped,
        already_current=already_current,
    )
    return RotationResult(
        old_key_id=old_key.key_id,
        new_key_id=new_key.key_id,
        rewrapped=rewrapped,
        already_current=already_current,
    )
