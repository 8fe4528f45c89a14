"""The vault's one error: a secret or key that cannot be used, without saying why in detail."""

from __future__ import annotations

from mosoo_core.errors import MosooError


class VaultError(MosooError):
    code = "vault_error"
