"""Provider credentials: an App's model providers, their keys sealed in the vault."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlmodel import Session, col, func, select
from sqlmodel.sql.expression import SelectOfScalar

from mosoo_core.clock import utcnow
from mosoo_core.errors import Conflict, InvalidInput, NotFound
from mosoo_core.ids import new_id
from mosoo_core.logs import get_logger
from mosoo_core.ownership import owned_app
from mosoo_core.tables.agents import Agent, AgentVersion
from mosoo_core.tables.sessions import AgentSession
from mosoo_core.tables.vault import ProviderCredential
from mosoo_core.vault._secrets import delete_secret, replace_secret, reveal_secret, store_secret
from mosoo_core.vault.types import (
    PROVIDER_PRESETS,
    ProviderCredentialInput,
    ProviderCredentialView,
    ProviderKind,
)

NAME_MAX = 80
BASE_URL_MAX = 500
MODELS_MAX = 100
MODEL_NAME_MAX = 200
API_KEY_MAX = 4096
# Shorter keys are masked without their last four characters, which would be too much of them.
LAST4_MIN_KEY_LENGTH = 12
MASK = "••••"

log = get_logger("mosoo.vault")


@dataclass(frozen=True)
class _Clean:
    name: str
    provider: ProviderKind
    base_url: str
    api_key: str
    models: list[str]
    default_model: str


def _owner_ref(credential_id: str) -> str:
    return f"provider_credential:{credential_id}:api_key"


def _clean_name(raw: str) -> str:
    name = " ".join((raw or "").split())
    if not name:
        raise InvalidInput("Name the provider.", field="name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"The name must be at most {NAME_MAX} characters.", field="name")
    return name


def _clean_provider(raw: str) -> ProviderKind:
    try:
        return ProviderKind((raw or "").strip())
    except ValueError:
        choices = ", ".join(kind.value for kind in ProviderKind)
        raise InvalidInput(f"Choose a provider: {choices}.", field="provider") from None


def _clean_base_url(raw: str, provider: ProviderKind) -> str:
    url = (raw or "").strip() or PROVIDER_PRESETS[provider].base_url
    if not url:
        raise InvalidInput("Enter the provider's base URL.", field="base_url")
    if len(url) > BASE_URL_MAX:
        raise InvalidInput(
            f"The base URL must be at most {BASE_URL_MAX} characters.", field="base_url"
        )
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        _ = parts.port  # raises on a malformed port
    except ValueError:
        raise InvalidInput("That base URL is not a valid URL.", field="base_url") from None
    if parts.scheme not in ("http", "https") or not hostname or any(c.isspace() for c in url):
        raise InvalidInput("The base URL must be an http:// or https:// URL.", field="base_url")
    if parts.username is not None or parts.password is not None:
        # A URL is stored and shown in clear; credentials belong in the key field.
        raise InvalidInput("Put credentials in the key field, not in the URL.", field="base_url")
    if parts.fragment:
        raise InvalidInput("The base URL cannot have a #fragment.", field="base_url")
    return url.rstrip("/")


def _clean_api_key(raw: str) -> str:
    key = (raw or "").strip()
    if len(key) > API_KEY_MAX:
        raise InvalidInput(f"The key must be at most {API_KEY_MAX} characters.", field="api_key")
    if any(c.isspace() or not c.isprintable() for c in key):
        raise InvalidInput("The key cannot contain spaces or line breaks.", field="api_key")
    return key


def _clean_models(raw: Sequence[str], default_model: str) -> tuple[list[str], str]:
    if isinstance(raw, str):
        raise InvalidInput("Models must be a list of names.", field="models")
    models: list[str] = []
    for item in raw:
        model = item.strip() if isinstance(item, str) else ""
        if not model:
            raise InvalidInput("Model names cannot be empty.", field="models")
        if len(model) > MODEL_NAME_MAX:
            raise InvalidInput(
                f"A model name must be at most {MODEL_NAME_MAX} characters.", field="models"
            )
        if model not in models:
            models.append(model)
    if len(models) > MODELS_MAX:
        raise InvalidInput(f"List at most {MODELS_MAX} models.", field="models")
    default = (default_model or "").strip()
    if not default:
        return models, models[0] if models else ""
    if default not in models:
        raise InvalidInput(
            "The default model must be one of the listed models.", field="default_model"
        )
    return models, default


def _validated(
    db: Session, app_id: str, data: ProviderCredentialInput, *, except_id: str | None
) -> _Clean:
    name = _clean_name(data.name)
    provider = _clean_provider(data.provider)
    base_url = _clean_base_url(data.base_url, provider)
    api_key = _clean_api_key(data.api_key)
    models, default_model = _clean_models(data.models, data.default_model)
    clash = select(ProviderCredential.id).where(
        ProviderCredential.app_id == app_id, func.lower(ProviderCredential.name) == name.lower()
    )
    if except_id is not None:
        clash = clash.where(ProviderCredential.id != except_id)
    if db.exec(clash).first() is not None:
        raise InvalidInput(f"This App already has a provider named {name!r}.", field="name")
    return _Clean(name, provider, base_url, api_key, models, default_model)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or ""), parts.port


def _last4(key: str) -> str:
    return key[-4:] if len(key) >= LAST4_MIN_KEY_LENGTH else ""


def _view(credential: ProviderCredential) -> ProviderCredentialView:
    has_key = credential.api_key_secret_id is not None
    return ProviderCredentialView(
        id=credential.id,
        app_id=credential.app_id,
        name=credential.name,
        provider=credential.provider,
        base_url=credential.base_url,
        models=tuple(credential.models or ()),
        default_model=credential.default_model,
        is_default=credential.is_default,
        has_key=has_key,
        masked_key=MASK + credential.key_last4 if has_key else "",
        created_at=credential.created_at,
        updated_at=credential.updated_at,
    )


def _owned_credential(
    db: Session, account_id: str, app_id: str, credential_id: str
) -> ProviderCredential:
    owned_app(db, account_id, app_id)
    credential = db.get(ProviderCredential, credential_id) if credential_id else None
    # Another App's (or owner's) credential is indistinguishable from one that does not exist.
    if credential is None or credential.app_id != app_id:
        raise NotFound("Provider not found.")
    return credential


def _clear_default(db: Session, app_id: str) -> None:
    for other in db.exec(
        select(ProviderCredential).where(
            ProviderCredential.app_id == app_id, col(ProviderCredential.is_default)
        )
    ).all():
        other.is_default = False
        db.add(other)
    # Flushed before a new default is set, so the one-default index never sees two.
    db.flush()


def _ordered(app_id: str) -> SelectOfScalar[ProviderCredential]:
    return (
        select(ProviderCredential)
        .where(ProviderCredential.app_id == app_id)
        .order_by(
            col(ProviderCredential.is_default).desc(),
            col(ProviderCredential.created_at),
            col(ProviderCredential.id),
        )
    )


def list_provider_credentials(
    db: Session, account_id: str, app_id: str
) -> list[ProviderCredentialView]:
    """The App's providers, the default first, keys masked."""
    owned_app(db, account_id, app_id)
    return [_view(credential) for credential in db.exec(_ordered(app_id)).all()]


def get_provider_credential(
    db: Session, account_id: str, app_id: str, credential_id: str
) -> ProviderCredentialView:
    """One provider of the App (key masked), or NotFound."""
    return _view(_owned_credential(db, account_id, app_id, credential_id))


def create_provider_credential(
    db: Session, account_id: str, app_id: str, data: ProviderCredentialInput
) -> ProviderCredentialView:
    """Add a provider to the App, its key sealed in the vault. The App's first provider
    becomes its default; a key is required except for Ollama."""
    owned_app(db, account_id, app_id)
    clean = _validated(db, app_id, data, except_id=None)
    if not clean.api_key and PROVIDER_PRESETS[clean.provider].needs_key:
        raise InvalidInput("Enter the API key.", field="api_key")
    has_any = db.exec(
        select(ProviderCredential.id).where(ProviderCredential.app_id == app_id)
    ).first()
    make_default = bool(data.is_default) or has_any is None
    now = utcnow()
    credential = ProviderCredential(
        id=new_id(),
        app_id=app_id,
        name=clean.name,
        provider=clean.provider.value,
        base_url=clean.base_url,
        models=clean.models,
        default_model=clean.default_model,
        is_default=False,
        created_at=now,
        updated_at=now,
    )
    if clean.api_key:
        credential.api_key_secret_id = store_secret(
            db, app_id=app_id, owner_ref=_owner_ref(credential.id), value=clean.api_key
        )
        credential.key_last4 = _last4(clean.api_key)
    if make_default:
        _clear_default(db, app_id)
        credential.is_default = True
    db.add(credential)
    db.flush()
    log.info(
        "provider_credential.created",
        app_id=app_id,
        credential_id=credential.id,
        provider=credential.provider,
    )
    return _view(credential)


def update_provider_credential(
    db: Session, account_id: str, app_id: str, credential_id: str, data: ProviderCredentialInput
) -> ProviderCredentialView:
    """Change a provider. A blank key keeps the stored one, except when the base URL changes
    (the key would go to a new host: enter it again) or the provider becomes Ollama without
    a key (the old key is dropped). `is_default=None` leaves the default flag as it is."""
    credential = _owned_credential(db, account_id, app_id, credential_id)
    clean = _validated(db, app_id, data, except_id=credential.id)
    needs_key = PROVIDER_PRESETS[clean.provider].needs_key
    had_key = credential.api_key_secret_id is not None
    new_host = _origin(clean.base_url) != _origin(credential.base_url)
    drop_key = False
    if not clean.api_key:
        if needs_key and not had_key:
            raise InvalidInput("Enter the API key.", field="api_key")
        if needs_key and new_host:
            # Otherwise a changed URL would send the saved key to a host it was never meant for.
            raise InvalidInput(
                "Enter the key again to use it with a new base URL.", field="api_key"
            )
        drop_key = had_key and not needs_key and (new_host or clean.provider != credential.provider)

    old_secret_id = credential.api_key_secret_id
    if clean.api_key and old_secret_id is not None:
        replace_secret(
            db,
            old_secret_id,
            app_id=app_id,
            owner_ref=_owner_ref(credential.id),
            value=clean.api_key,
        )
        credential.key_last4 = _last4(clean.api_key)
    elif clean.api_key:
        credential.api_key_secret_id = store_secret(
            db, app_id=app_id, owner_ref=_owner_ref(credential.id), value=clean.api_key
        )
        credential.key_last4 = _last4(clean.api_key)
    elif drop_key:
        credential.api_key_secret_id = None
        credential.key_last4 = ""

    credential.name = clean.name
    credential.provider = clean.provider.value
    credential.base_url = clean.base_url
    credential.models = clean.models
    credential.default_model = clean.default_model
    if data.is_default is True and not credential.is_default:
        _clear_default(db, app_id)
        credential.is_default = True
    elif data.is_default is False:
        credential.is_default = False
    credential.updated_at = utcnow()
    db.add(credential)
    db.flush()
    if drop_key and old_secret_id is not None:
        delete_secret(db, old_secret_id)
    log.info("provider_credential.updated", app_id=app_id, credential_id=credential.id)
    return _view(credential)


def set_default_provider_credential(
    db: Session, account_id: str, app_id: str, credential_id: str
) -> ProviderCredentialView:
    """Make this the App's default provider (the previous default stops being one)."""
    credential = _owned_credential(db, account_id, app_id, credential_id)
    if not credential.is_default:
        _clear_default(db, app_id)
        credential.is_default = True
        credential.updated_at = utcnow()
        db.add(credential)
        db.flush()
    return _view(credential)


def _versions_using(db: Session, app_id: str, credential_id: str) -> list[tuple[str, int]]:
    """(Agent name, version number) of the versions that can still run with the key: the
    published version of each Agent and every version a thread pins."""
    used: list[tuple[str, int]] = []
    rows = db.exec(
        select(Agent, AgentVersion)
        .join(AgentVersion, col(AgentVersion.agent_id) == col(Agent.id))
        .where(Agent.app_id == app_id)
        .order_by(func.lower(Agent.name), col(Agent.id), col(AgentVersion.number))
    ).all()
    for agent, version in rows:
        if (version.profile or {}).get("provider_credential_id") != credential_id:
            continue
        published = agent.status == "published" and agent.published_version == version.number
        pinned = (
            published
            or db.exec(
                select(AgentSession.id)
                .where(
                    AgentSession.agent_id == agent.id, AgentSession.agent_version == version.number
                )
                .limit(1)
            ).first()
            is not None
        )
        if pinned:
            used.append((agent.name, version.number))
    return used


def delete_provider_credential(
    db: Session, account_id: str, app_id: str, credential_id: str
) -> None:
    """Remove a provider and its sealed key. If it was the default, the oldest remaining
    provider becomes the default. Refused (Conflict, naming them) while Agents use it."""
    credential = _owned_credential(db, account_id, app_id, credential_id)
    users = db.exec(
        select(Agent.name)
        .where(Agent.app_id == app_id, Agent.provider_credential_id == credential.id)
        .order_by(func.lower(Agent.name), col(Agent.id))
    ).all()
    if users:
        raise Conflict(f"Used by agent(s): {', '.join(users)}. Choose another key for them first.")
    # Published versions (and versions threads pin) still run with the key, though the draft moved on.
    versions = _versions_using(db, app_id, credential.id)
    if versions:
        named = ", ".join(f"{name} version {number}" for name, number in versions)
        raise Conflict(
            f"Used by published agent version(s): {named}. Publish a version with another key, or unpublish "
            "the agent and delete the threads that pin the version, first."
        )
    secret_id, was_default = credential.api_key_secret_id, credential.is_default
    db.delete(credential)
    db.flush()
    if secret_id is not None:
        delete_secret(db, secret_id)
    if was_default:
        successor = db.exec(_ordered(app_id)).first()
        if successor is not None:
            successor.is_default = True
            db.add(successor)
            db.flush()
    log.info("provider_credential.deleted", app_id=app_id, credential_id=credential_id)


def reveal_provider_key(db: Session, credential_id: str, *, app_id: str | None = None) -> str:
    """INTERNAL: the plaintext key of a credential ("" when it has none).

    Only the model gateway calls this, to call the provider on behalf of a run it has already
    authorized. No page, API route or CLI command may call it or pass its result on: keys are
    never shown after they are saved and never enter a sandbox. `app_id`, when given, must be
    the credential's App (the run's App), else NotFound.
    """
    credential = db.get(ProviderCredential, credential_id) if credential_id else None
    if credential is None or (app_id is not None and credential.app_id != app_id):
        raise NotFound("Provider not found.")
    if credential.api_key_secret_id is None:
        return ""
    return reveal_secret(
        db,
        credential.api_key_secret_id,
        app_id=credential.app_id,
        owner_ref=_owner_ref(credential.id),
    )
