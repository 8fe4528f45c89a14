"""Envelope encryption: AES-256-GCM under a per-secret data key, the data key wrapped by the KEK.

A sealed secret is three values: the id of the KEK that wraps its data key, the wrapped data
key, and the ciphertext. Both encryptions authenticate the same context (App id, record id,
owner) as additional data, so a ciphertext copied to another App or record does not open.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mosoo_core.vault._errors import VaultError
from mosoo_core.vault._keys import KEY_BYTES, MasterKey

FORMAT_VERSION = b"\x01"
NONCE_BYTES = 12
_LABEL = b"mosoo.vault.v1"


@dataclass(frozen=True)
class Sealed:
    key_id: str
    wrapped_key: bytes = field(repr=False)
    ciphertext: bytes = field(repr=False)


def _aad(purpose: str, context: Sequence[str]) -> bytes:
    # Length-prefixed parts, so ("ab", "c") and ("a", "bc") never authenticate the same.
    parts = [_LABEL, purpose.encode(), *(str(part).encode() for part in context)]
    return b"".join(struct.pack(">I", len(part)) + part for part in parts)


def _encrypt(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return FORMAT_VERSION + nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def _decrypt(key: bytes, blob: bytes, aad: bytes) -> bytes:
    if len(blob) < 1 + NONCE_BYTES + 16 or blob[:1] != FORMAT_VERSION:
        raise VaultError("The secret is damaged and cannot be decrypted.")
    nonce, body = blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :]
    try:
        return AESGCM(key).decrypt(nonce, body, aad)
    except InvalidTag:
        raise VaultError("The secret cannot be decrypted here.") from None


def seal(kek: MasterKey, plaintext: bytes, context: Sequence[str]) -> Sealed:
    """Encrypt under a fresh random data key and wrap that key with the KEK."""
    data_key = AESGCM.generate_key(bit_length=KEY_BYTES * 8)
    return Sealed(
        key_id=kek.key_id,
        wrapped_key=_encrypt(kek.secret, data_key, _aad("data-key", context)),
        ciphertext=_encrypt(data_key, plaintext, _aad("value", context)),
    )


def _unwrap(kek: MasterKey, sealed: Sealed, context: Sequence[str]) -> bytes:
    if sealed.key_id != kek.key_id:
        raise VaultError(
            f"The secret is sealed under master key {sealed.key_id}, but the configured master key "
            f"is {kek.key_id}. Finish `mosoo vault rotate` or configure the matching key."
        )
    return _decrypt(kek.secret, sealed.wrapped_key, _aad("data-key", context))


def unseal(kek: MasterKey, sealed: Sealed, context: Sequence[str]) -> bytes:
    """The plaintext, or VaultError if the key, the context or a single byte differs."""
    data_key = _unwrap(kek, sealed, context)
    return _decrypt(data_key, sealed.ciphertext, _aad("value", context))


def rewrap(old: MasterKey, new: MasterKey, sealed: Sealed, context: Sequence[str]) -> Sealed:
    """The same data key and ciphertext, the data key now wrapped by `new`; verified by a full
    decryption under `new` before it is returned."""
    data_key = _unwrap(old, sealed, context)
    # Prove the ciphertext opens with this data key before re-wrapping it.
    _decrypt(data_key, sealed.ciphertext, _aad("value", context))
    rewrapped = Sealed(
        key_id=new.key_id,
        wrapped_key=_encrypt(new.secret, data_key, _aad("data-key", context)),
        ciphertext=sealed.ciphertext,
    )
    unseal(new, rewrapped, context)
    return rewrapped
