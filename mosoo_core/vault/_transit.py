"""Secrets in transit through the database: a driver's assignment (its run's grants and
secret variables) waits in the driver's command queue sealed under the master key, until
control opens it to send it over the driver's socket. Not `VaultSecret` rows: such a value
lives as long as its command, and is wiped once the command is done."""

from __future__ import annotations

import base64
from collections.abc import Mapping

from mosoo_core.vault._crypto import Sealed, seal, unseal
from mosoo_core.vault._errors import VaultError
from mosoo_core.vault._keys import load_master_key


def _context(app_id: str, ref: str) -> tuple[str, str, str]:
    return ("transit", app_id, ref)


def seal_in_transit(app_id: str, ref: str, plaintext: bytes) -> dict[str, str]:
    """`plaintext` sealed for `ref` (what it is for, e.g. a driver instance) of `app_id`: a
    JSON-able mapping that opens only with the same App, ref and master key."""
    sealed = seal(load_master_key(), plaintext, _context(app_id, ref))
    return {
        "key_id": sealed.key_id,
        "wrapped_key": base64.b64encode(sealed.wrapped_key).decode(),
        "ciphertext": base64.b64encode(sealed.ciphertext).decode(),
    }


def open_in_transit(app_id: str, ref: str, sealed: Mapping[str, object]) -> bytes:
    """The plaintext of `seal_in_transit`; VaultError when anything differs."""
    try:
        value = Sealed(
            key_id=str(sealed["key_id"]),
            wrapped_key=base64.b64decode(str(sealed["wrapped_key"]), validate=True),
            ciphertext=base64.b64decode(str(sealed["ciphertext"]), validate=True),
        )
    except (KeyError, ValueError) as error:
        raise VaultError("The sealed value is damaged.") from error
    return unseal(load_master_key(), value, _context(app_id, ref))
