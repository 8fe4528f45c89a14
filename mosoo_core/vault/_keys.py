"""The key-encryption key (KEK): from `MOSOO_MASTER_KEY`, else a 0600 key file made on first use."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from mosoo_core.logs import get_logger
from mosoo_core.settings import Settings, get_settings
from mosoo_core.vault._errors import VaultError

KEY_BYTES = 32
log = get_logger("mosoo.vault")


@dataclass(frozen=True)
class MasterKey:
    """A 256-bit KEK. `key_id` names it without revealing it; the bytes never print."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != KEY_BYTES:
            raise VaultError(f"A master key must be {KEY_BYTES} bytes.")

    @property
    def key_id(self) -> str:
        # An HMAC under the key itself: stable, short, and useless for guessing the key.
        return hmac.new(self.secret, b"mosoo.vault.key-id", hashlib.sha256).hexdigest()[:16]

    @classmethod
    def generate(cls) -> MasterKey:
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def from_text(cls, text: str, *, source: str = "the master key") -> MasterKey:
        """Parse base64 (standard or URL-safe) of exactly 32 bytes."""
        raw = text.strip()
        try:
            decoded = base64.b64decode(raw.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise VaultError(f"{source} is not valid base64.") from None
        if len(decoded) != KEY_BYTES:
            raise VaultError(f"{source} must be base64 of {KEY_BYTES} bytes, got {len(decoded)}.")
        return cls(decoded)

    def to_text(self) -> str:
        return base64.b64encode(self.secret).decode()


def read_key_file(path: Path) -> MasterKey:
    """Load a key file (the same base64 text `MOSOO_MASTER_KEY` takes)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise VaultError(f"Master key file {path} does not exist.") from None
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("vault.key_file_too_open", path=str(path), mode=oct(mode))
    return MasterKey.from_text(text, source=f"Master key file {path}")


def create_key_file(path: Path) -> MasterKey:
    """Write a fresh key to `path` with mode 0600; refuses to replace an existing file.

    The key is written to a private temporary file and hard-linked into place, so a
    concurrent reader never sees a half-written file and two racing processes agree on one key.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    key = MasterKey.generate()
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(key.to_text() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    log.info("vault.key_file_created", path=str(path), key_id=key.key_id)
    return key


def load_master_key(settings: Settings | None = None, *, create: bool = True) -> MasterKey:
    """The configured KEK: `MOSOO_MASTER_KEY`, else the key file (created on first use
    unless `create` is False, as for `mosoo vault rotate`, which must not invent an old key)."""
    settings = settings or get_settings()
    configured = settings.master_key.get_secret_value()
    if configured:
        return MasterKey.from_text(configured, source="MOSOO_MASTER_KEY")
    path = settings.resolved_master_key_file
    if not path.exists() and create:
        try:
            return create_key_file(path)
        except FileExistsError:
            pass  # another process made it first: use theirs
    return read_key_file(path)
