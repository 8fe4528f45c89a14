"""The vault: envelope encryption of secrets, and the App's model provider credentials.

Public services take the acting account and App and check ownership. The secret-level
functions (`store_secret`, `reveal_secret`, ...) and `reveal_provider_key` are internal:
they are for other services and the model gateway, never for a page or an API route.
"""

from mosoo_core.vault._connection import check_provider_connection
from mosoo_core.vault._credentials import (
    MASK,
    create_provider_credential,
    delete_provider_credential,
    get_provider_credential,
    list_provider_credentials,
    reveal_provider_key,
    set_default_provider_credential,
    update_provider_credential,
)
from mosoo_core.vault._errors import VaultError
from mosoo_core.vault._headers import provider_headers
from mosoo_core.vault._keys import MasterKey, create_key_file, load_master_key, read_key_file
from mosoo_core.vault._secrets import (
    count_secrets_by_key,
    delete_secret,
    replace_secret,
    reveal_secret,
    rotate_master_key,
    store_secret,
)
from mosoo_core.vault._transit import open_in_transit, seal_in_transit
from mosoo_core.vault.types import (
    PROVIDER_PRESETS,
    ConnectionResult,
    ProviderCredentialInput,
    ProviderCredentialView,
    ProviderKind,
    ProviderPreset,
    RotationResult,
)

__all__ = [
    "MASK",
    "PROVIDER_PRESETS",
    "ConnectionResult",
    "MasterKey",
    "ProviderCredentialInput",
    "ProviderCredentialView",
    "ProviderKind",
    "ProviderPreset",
    "RotationResult",
    "VaultError",
    "check_provider_connection",
    "count_secrets_by_key",
    "create_key_file",
    "create_provider_credential",
    "delete_provider_credential",
    "delete_secret",
    "get_provider_credential",
    "list_provider_credentials",
    "load_master_key",
    "open_in_transit",
    "provider_headers",
    "read_key_file",
    "replace_secret",
    "reveal_provider_key",
    "reveal_secret",
    "rotate_master_key",
    "seal_in_transit",
    "set_default_provider_credential",
    "store_secret",
    "update_provider_credential",
]
